"""The verdict on each claim of docs/SCIENCE.md ("Claims and where they stand"), computed from the
results.json dicts of the studies: pure functions, one per claim, each returning a `Verdict` with
its criterion (printed beside it in the report) and the numbers it was decided on.

A study that was not run is passed as None with the reason, and gives "not measured". A verdict
that needs a model trained here (Godey 4a, 4b, 4c; Machina & Mercer b) is not testable where those
models did not learn (`studies.training.learned`: the final validation loss not clearly below the
uniform prediction's ln V); the numbers say which models and why.

Each verdict carries its sensitivity entry (`Verdict.sensitivity`, the report's "sensitivity"
column): the same rule recomputed from the same results under other choices of its constants
(each `*_rule` takes them as parameters, their defaults the decided values; the alternatives are
the `*_ALTERNATIVES` dicts), "robust" when none changes the verdict.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.studies.training import learned
from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.studies.report.verdict import (  # noqa: F401 (re-exported)
    CLAIMS, CONFIDENCE, CONFIDENCE_ALTERNATIVES, FAILS, HOLDS, NO_TEST, NOT_MEASURED, NOT_TESTABLE,
    PARTLY, PRECISION_NOTE, VERDICTS, Verdict, all_or_some, below_precision, precision_note,
    g as _g, interval as _fmt_interval, not_measured as _not_measured, sensitivity_entry,
    with_sensitivity)
from anisotropy_jax.studies.report.verdicts_key_term import (  # noqa: F401
    KEY_TERM_ALTERNATIVES, godey_4b)
from anisotropy_jax.studies.report.verdicts_centring import (  # noqa: F401
    DRIFT_SHARE, GODEY_2_ALTERNATIVES, GODEY_2_MODELS, GODEY_2_SENSITIVITY, GODEY_2_SHARE,
    godey_2, intermediate as _intermediate)
from anisotropy_jax.studies.report.verdicts_sweep import (  # noqa: F401
    SWEEP_ALTERNATIVES, godey_3a, godey_3b)
from anisotropy_jax.studies.report.verdicts_trend import (  # noqa: F401
    SENSITIVITY_STARTS, TRANSIENT_END_STEP, TREND_ALTERNATIVES, godey_4a, godey_4c,
    trend_after_transient)

# Thresholds of the criteria (each printed in its criterion text).
MODALITY_MARGIN = 0.1       # Godey 1: trained minus the largest untrained cross-sequence cosine
PYTHIA_ISOTROPY = 0.9       # Machina & Mercer a: centred partition isotropy I(W)
COLLAPSED_RANK = 1.5        # depth: per-sequence effective rank of a collapsed sequence
COLLAPSE_COSINE = 0.5       # depth b: average cosine at which collapse counts as anisotropy
STATE_SHARE = 0.5           # Godey 1: the share of the intermediate states that must pass

# The sensitivity entries: {label: the rule's constants under that alternative}.
GODEY_1_ALTERNATIVES = {"margin ≥ 0.05": {"margin": 0.05}, "margin ≥ 0.2": {"margin": 0.2},
                        "at ≥ 1/4 of the states": {"state_share": 0.25},
                        "at ≥ 3/4 of the states": {"state_share": 0.75}}
MM_A_ALTERNATIVES = {"I(W) ≥ 0.8": {"isotropy": 0.8}, "I(W) ≥ 0.95": {"isotropy": 0.95}}
RANK_ALTERNATIVES = {"effective rank ≤ 1.25": {"rank": 1.25},
                     "effective rank ≤ 2": {"rank": 2.0}}
DEPTH_B_ALTERNATIVES = {"average cosine ≥ 0.25": {"cosine": 0.25},
                        "average cosine ≥ 0.75": {"cosine": 0.75}, **RANK_ALTERNATIVES}
# Every claim's alternatives (the keys of its `Verdict.sensitivity` where measured).
ALTERNATIVES = {"godey_1": GODEY_1_ALTERNATIVES, "godey_2": GODEY_2_ALTERNATIVES,
                "godey_3a": SWEEP_ALTERNATIVES, "godey_3b": SWEEP_ALTERNATIVES,
                "godey_4a": TREND_ALTERNATIVES, "godey_4b": KEY_TERM_ALTERNATIVES,
                "godey_4c": TREND_ALTERNATIVES, "mm_a": MM_A_ALTERNATIVES,
                "mm_b": CONFIDENCE_ALTERNATIVES, "depth_a": RANK_ALTERNATIVES,
                "depth_b": DEPTH_B_ALTERNATIVES}


def _decide(key: str, criterion: str, oks: Sequence[bool], numbers: Sequence[str],
            scope: str = "") -> Verdict:
    """HOLDS when every unit passes (FAILS otherwise)."""
    return Verdict(key, criterion, HOLDS if oks and all(oks) else FAILS, tuple(numbers), scope)


def godey_1(modalities: Mapping[str, Any] | None, reason: str = "") -> Verdict:
    """`godey_1_rule` with its sensitivity entry (GODEY_1_ALTERNATIVES)."""
    return with_sensitivity(godey_1_rule, GODEY_1_ALTERNATIVES, modalities, reason)


def godey_1_rule(modalities: Mapping[str, Any] | None, reason: str = "",
                 margin: float = MODALITY_MARGIN, state_share: float = STATE_SHARE) -> Verdict:
    """Modalities results.json {"models": {name: {"architecture", "labels", "per_layer":
    {"cross_sequence_cosine": {"trained", "untrained_max", ...}}, "untrained_seeds", "scope"}}}."""
    crit = (f"per trained vision/speech Transformer: its cross-sequence cosine exceeds the largest "
            f"of its ≥ 2 untrained re-initialisations' by ≥ {margin} at at least half of "
            f"its intermediate states; partly if that holds for some of them or only for the "
            f"modalities measured (the claim also covers character-level models and CNNs, which "
            f"are not measured with trained weights here); does not hold if for none")
    models = {} if modalities is None else modalities.get("models", {})
    trained = {n: m for n, m in models.items() if m.get("architecture") == "transformer"
               and m.get("per_layer", {}).get("cross_sequence_cosine", {}).get("trained")
               and len(m.get("untrained_seeds", [])) >= 2}
    if not trained:
        return _not_measured("godey_1", crit, reason or "no trained vision/speech Transformer "
                             "with ≥ 2 untrained seeds")
    oks, numbers, scope = [], [], []
    for name, m in trained.items():
        cross = m["per_layer"]["cross_sequence_cosine"]
        inner = _intermediate(m["labels"])
        t = np.asarray(cross["trained"], np.float64)[inner]
        u = np.asarray(cross["untrained_max"], np.float64)[inner]
        above = int(np.sum(t >= u + margin))
        oks.append(above >= len(inner) * state_share)
        numbers.append(f"{name}: {above} of {len(inner)} intermediate states above the untrained "
                       f"maximum + {margin} (trained {_g(t.min())}–{_g(t.max())}, "
                       f"untrained max {_g(u.min())}–{_g(u.max())}, "
                       f"{len(m['untrained_seeds'])} seeds)"
                       + precision_note(t, u + margin))
        sc = m.get("scope", {})
        scope.append(f"{name} ({sc.get('modality')}, {sc.get('inputs')}"
                     + (", synthetic" if sc.get("inputs_synthetic") else "") + ")")
    for name, m in models.items():
        if m.get("architecture") == "cnn":
            u = m["per_layer"].get("cross_sequence_cosine", {}).get("untrained", m["untrained"])
            numbers.append(f"{name} (untrained CNN, for reference): {_g(min(u))}–{_g(max(u))}")
    verdict = FAILS if not any(oks) else PARTLY
    return Verdict("godey_1", crit, verdict, tuple(numbers),
                   "trained: " + "; ".join(scope) + "; no trained CNN and no character-level "
                   "weights are installed, so those parts of the claim are not measured")


def _embeddings(pretrained: Mapping[str, Mapping[str, Any]] | None, model_types=None,
                causal=None) -> dict[str, Mapping[str, float]]:
    out = {}
    for name, doc in (pretrained or {}).items():
        model = doc["model"]
        if model_types is not None and model.get("model_type") not in model_types:
            continue
        if causal is not None and bool(model.get("causal")) != causal:
            continue
        out[name] = doc.get("embeddings", {}).get("trained", {})
    return out


def mm_a(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "") -> Verdict:
    """`mm_a_rule` with its sensitivity entry (MM_A_ALTERNATIVES)."""
    return with_sensitivity(mm_a_rule, MM_A_ALTERNATIVES, pretrained, reason)


def mm_a_rule(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
              isotropy: float = PYTHIA_ISOTROPY) -> Verdict:
    crit = (f"holds if every GPT-NeoX (Pythia) model measured has centred partition isotropy "
            f"I(W) ≥ {isotropy} for its input and its output embedding")
    found = _embeddings(pretrained, model_types=("gpt_neox",))
    if not found:
        return _not_measured("mm_a", crit, reason or "no GPT-NeoX (Pythia) checkpoint among the "
                             "models measured (their object: none is installed)")
    oks, numbers = [], []
    for name, emb in found.items():
        values = [emb[k] for k in ("input_centred", "output_centred") if k in emb]
        oks.append(bool(values) and min(values) >= isotropy)
        numbers.append(f"{name}: " + ", ".join(f"{k} {_g(v)}" for k, v in emb.items()))
    return _decide("mm_a", crit, oks, numbers)


def _gain_direction(embeddings: Mapping[str, Any] | None, confidence: float = CONFIDENCE
                    ) -> list[tuple[str, tuple, int, int]]:
    """Per width of the embedding study at its last checkpoint: (name, (mean, low, high) of the
    centred sign-free I(W·diag γ) − I(W·c) over seeds, seeds > 0, seeds); the interval as
    recorded, or at another `confidence` from the recorded per-seed values."""
    found = (embeddings or {}).get("gain_direction", {}).get("centered")
    if not found or found.get("low") is None or (confidence != CONFIDENCE
                                                 and "per_seed" not in found):
        return []  # (not recomputable at another level without the per-seed values)
    out = []
    for w, width in enumerate(embeddings["widths"]):
        cell = tuple(float(np.asarray(found[k], np.float64)[w][-1])
                     for k in ("mean", "low", "high"))
        if confidence != CONFIDENCE:
            q = t_interval(np.asarray(found["per_seed"], np.float64)[w][:, -1],
                           confidence=confidence)
            cell = (float(q["mean"]), float(q["low"]), float(q["high"]))
        out.append((f"trained here, D = {width}", cell,
                    int(np.asarray(found["positive"])[w][-1]), int(found["n"])))
    return out


def _untrained_widths(embeddings: Mapping[str, Any]) -> dict[int, str]:
    """{width index: why} for the widths of the embedding study whose models did not learn
    (`training.learned.check` of each seed's final validation loss against ln vocab_size; no
    loss or vocabulary recorded: not learned either)."""
    val = np.asarray(embeddings.get("val_loss", []), np.float64)
    vocab, seeds = embeddings.get("vocab_size"), embeddings.get("seeds") or []
    out = {}
    for w in range(len(embeddings["widths"])):
        if vocab is None or val.ndim != 3:
            out[w] = "no validation loss or vocabulary size recorded: whether it learned is unknown"
            continue
        check = learned.check(list(val[w, :, -1]), int(vocab),
                              [f"seed {s}" for s in seeds] if len(seeds) == val.shape[1] else None)
        if check["note"]:
            out[w] = check["note"]
    return out


def mm_b(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
         embeddings: Mapping[str, Any] | None = None) -> Verdict:
    """`mm_b_rule` with its sensitivity entry (the intervals' other levels)."""
    return with_sensitivity(mm_b_rule, CONFIDENCE_ALTERNATIVES, pretrained, reason, embeddings)


def mm_b_rule(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
              embeddings: Mapping[str, Any] | None = None,
              confidence: float = CONFIDENCE) -> Verdict:
    crit = ("decided at equal scale (partition isotropy falls with the matrix's scale alone): "
            "d = I(W·diag γ) − I(W·c), c = ‖W·diag γ‖_F/‖W‖_F, centred, sign-free, W the output "
            "embedding, γ the final norm's gain; holds if d > 0 (95% t-interval over ≥ 2 seeds "
            "above 0) for every width of the GPT-NeoX-style models trained here, does not hold "
            "if below 0 for every width, otherwise not testable at this scale (γ acts as a "
            "rescaling); the installed causal LMs (one checkpoint each, no interval) are shown "
            "beside it")
    units = _gain_direction(embeddings, confidence)
    models = {n: e for n, e in _embeddings(pretrained, causal=True).items()
              if "output_equalnorm_centred" in e}
    if not units:
        return _not_measured("mm_b", crit, reason or "no embedding study with the gain's "
                             "equal-norm control and ≥ 2 seeds")
    untrained = _untrained_widths(embeddings)
    numbers = [f"{name}: d = {_fmt_interval(*cell)} ({pos} of {n} seeds > 0)"
               + (f"; not testable, {untrained[w]}" if w in untrained else "")
               for w, (name, cell, pos, n) in enumerate(units)]
    if len(units) > 1:
        numbers.append(_width_trend(units))
    for name, e in models.items():
        d = e["output_scaled_centred"] - e["output_equalnorm_centred"]
        numbers.append(f"{name}: d = {_g(d)} (output × γ {_g(e['output_scaled_centred'])}, at "
                       f"equal norm {_g(e['output_equalnorm_centred'])}, unscaled output "
                       f"{_g(e['output_centred'])}; mean γ {_g(e['final_gain_mean'])})")
    if untrained:  # a width whose models did not learn decides nothing
        verdict = NO_TEST if len(untrained) == len(units) else NOT_TESTABLE
    elif all(cell[1] > 0 for _, cell, _, _ in units):
        verdict = HOLDS
    elif all(cell[2] < 0 for _, cell, _, _ in units):
        verdict = FAILS
    else:
        verdict = NOT_TESTABLE
    widths = ", ".join(name.rsplit("= ", 1)[1] for name, *_ in units)
    steps = np.ravel(embeddings.get("steps", [0]))[-1]
    device = embeddings.get("provenance", {}).get("device_kind", "?")
    scope = (f"Machina & Mercer's object (embedding matrices) in GPT-NeoX-style models trained "
             f"here (D = {widths}, {units[0][3]} seeds each, {int(steps):,} steps, on {device}; "
             f"about 3 orders of magnitude below Pythia's size)"
             + (f"; installed: {', '.join(models)}" if models else ""))
    return Verdict("mm_b", crit, verdict, tuple(numbers), scope)


def _width_trend(units) -> str:
    """The seed-mean d against the width, in increasing width, and whether it is monotone."""
    means = [cell[0] for _, cell, _, _ in units]
    steps = np.sign(np.diff(means))
    shape = ("rises at every larger width" if (steps > 0).all() else "falls at every larger width"
             if (steps < 0).all() else "is not monotone in the width")
    return ("trend with width: mean d " + " → ".join(
        f"{_g(m)} (D = {name.rsplit('= ', 1)[1]})" for m, (name, *_) in zip(means, units))
        + f": it {shape}")


def _attention_only_at_zero(depth: Mapping[str, Any] | None
                            ) -> tuple[dict[str, Mapping[str, Any]], int | None]:
    if depth is None:
        return {}, None
    norms = [float(s) for s in depth["bias_norms"]]
    stacks = {n: st for n, st in depth["stacks"].items()
              if st.get("architecture") == "attention_only"}
    return stacks, (norms.index(0.0) if 0.0 in norms else None)


def _depth_scope(depth: Mapping[str, Any], stacks: Mapping[str, Any]) -> str:
    seeds = depth.get("depth_config", {}).get("num_seeds")
    return (f"untrained attention-only stacks ({', '.join(stacks)}), {depth['num_layers']} "
            f"layers, Gaussian inputs at s = 0, {seeds} seeds")


def depth_a(depth: Mapping[str, Any] | None, reason: str = "") -> Verdict:
    """`depth_a_rule` with its sensitivity entry (RANK_ALTERNATIVES)."""
    return with_sensitivity(depth_a_rule, RANK_ALTERNATIVES, depth, reason)


def depth_a_rule(depth: Mapping[str, Any] | None, reason: str = "",
                 rank: float = COLLAPSED_RANK) -> Verdict:
    crit = (f"holds if, in every attention-only stack at s = 0, the mean per-sequence effective "
            f"rank falls from its input value to ≤ {rank} at the deepest layer")
    stacks, i = _attention_only_at_zero(depth)
    if not stacks or i is None:
        return _not_measured("depth_a", crit, reason or "no attention-only stack at s = 0")
    oks, numbers = [], []
    for name, st in stacks.items():
        ranks = np.asarray(st["curves"]["effective_rank"]["mean"], np.float64)[i]
        oks.append(bool(ranks[-1] <= rank < ranks[0]))
        numbers.append(f"{name}: effective rank {_g(ranks[0])} (input) → {_g(ranks[-1])} "
                       f"(layer {ranks.size - 1})" + precision_note([ranks[-1]], rank))
    return _decide("depth_a", crit, oks, numbers, _depth_scope(depth, stacks))


def depth_b(depth: Mapping[str, Any] | None, reason: str = "") -> Verdict:
    """`depth_b_rule` with its sensitivity entry (DEPTH_B_ALTERNATIVES)."""
    return with_sensitivity(depth_b_rule, DEPTH_B_ALTERNATIVES, depth, reason)


def depth_b_rule(depth: Mapping[str, Any] | None, reason: str = "", cosine: float = COLLAPSE_COSINE,
                 rank: float = COLLAPSED_RANK) -> Verdict:
    crit = (f"holds if, in every attention-only stack at s = 0 whose deepest layer has collapsed "
            f"(effective rank ≤ {rank}), the average cosine over all token pairs there "
            f"is ≥ {cosine}")
    stacks, i = _attention_only_at_zero(depth)
    collapsed = {n: st for n, st in stacks.items() if i is not None and np.asarray(
        st["curves"]["effective_rank"]["mean"], np.float64)[i][-1] <= rank}
    if not collapsed:
        return _not_measured("depth_b", crit, reason or "no collapsed attention-only stack at s = 0")
    oks, numbers = [], []
    for name, st in collapsed.items():
        cos = float(np.asarray(st["curves"]["average_cosine"]["mean"], np.float64)[i][-1])
        cross = st.get("per_layer", {}).get("output_cross_sequence_cosine")
        oks.append(cos >= cosine)
        numbers.append(f"{name}: average cosine {_g(cos)} at the deepest layer"
                       + (f", cross-sequence {_g(np.asarray(cross)[i][-1])}" if cross else "")
                       + precision_note([cos], cosine))
    return _decide("depth_b", crit, oks, numbers, _depth_scope(depth, collapsed))


def all_verdicts(docs: Mapping[str, Any], reasons: Mapping[str, str]) -> list[Verdict]:
    """Every claim, in CLAIMS order, from {study: results} (None where not run) and the reasons
    of the studies not run."""
    def args(study):
        return docs.get(study), reasons.get(study, "")
    return [godey_1(*args("modalities")), godey_2(*args("pretrained")),
            godey_3a(*args("sweep")), godey_3b(*args("sweep")), godey_4a(*args("training")),
            godey_4b(*args("training")), godey_4c(*args("training")), mm_a(*args("pretrained")),
            mm_b(*args("pretrained"), docs.get("embeddings")), depth_a(*args("depth")),
            depth_b(*args("depth"))]
