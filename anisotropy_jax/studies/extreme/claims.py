"""Verdicts of the extreme-token claims (a)–(e) from committed extreme-token results, and the
table that docs/REPORT.md embeds (`anisotropy_jax.doc_tables` kind `extreme_claims`).

The thresholds are those pre-registered in docs/EXTREME.md ("Pre-registered claims and
thresholds"); the rows were restated after review (docs/EXTREME.md, "Restated claims"), each
with its rule as a constant (FIRST_TOKEN_RULE, CARRIED_RULE, COLLAPSE_RULE, MASSIVE_RULE) that
the table prints: (a) and the former (a′) are one claim about the first token, tested with and
without a BOS on every causal model; (b) has two controls; (d) has its norm-weighting caveat and
the unit-row row (d′); (e) counts massive activations by ratio and absolute size.

`load(folder)` merges the models of every results.json under `folder` (one run per model, or one
run of all); `rows(models)` gives (claim, verdict, numbers) per row; `table(folder)` the markdown.
"Trained" is one network; the untrained numbers are the range (min–max) over the re-initialised
seeds, the only interval quoted: no statistic is computed over the layers or heads of one network
as if they were independent samples.
"""
from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.configs.extreme import EXTREME_MODELS, GEMMA3
from anisotropy_jax.studies.extreme import summary
from anisotropy_jax.studies.extreme.rules import (CARRIED_RULE, CARRIED_SHARE, COLLAPSE_RULE,
                                                   CONTROL_MARGIN, COSINE_KEPT, FIRST_TOKEN_RULE,
                                                   MASSIVE_RULE, PC_COLLAPSE, PC_JUMP, PC_PRESENT,
                                                   ROTARY, SAME_LAYER, SINK_BLOCK_RATE)

SHORT = {GEMMA3: "Gemma-3", "all-MiniLM-L6-v2": "MiniLM-L6", "paraphrase-MiniLM-L3-v2": "MiniLM-L3",
         "all-mpnet-base-v2": "MPNet", "SmolLM2-135M-Instruct": "SmolLM2",
         "Whisper-tiny.en": "Whisper-tiny", "Whisper-base": "Whisper-base", "DINOv2-S": "DINOv2-S"}


def load(folder: str | pathlib.Path) -> dict[str, dict[str, Any]]:
    """{model name: its results.json entry} over every results.json under `folder`, in the order
    of EXTREME_MODELS."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(pathlib.Path(folder).rglob("results.json")):
        found.update(results.read_results(path)["models"])
    order = [n for n in EXTREME_MODELS if n in found] + sorted(set(found) - set(EXTREME_MODELS))
    return {name: found[name] for name in order}


def short(name: str) -> str:
    return SHORT.get(name, name)


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


def sink_blocks(entry: dict[str, Any]) -> list[int]:
    """Blocks (1-based: block i makes state i) whose trained sink rate is > SINK_BLOCK_RATE and
    above the maximum over the untrained seeds."""
    rates = entry["trained"]["attention"]["sink_rate"]
    ceiling = entry["untrained"]["max"]["attention"]["sink_rate"]
    return [i + 1 for i, (r, c) in enumerate(zip(rates, ceiling))
            if _num(r) > SINK_BLOCK_RATE and _num(r) > _num(c)]


def _max_rate(run: dict[str, Any]) -> float:
    return max(_num(r) for r in run["attention"]["sink_rate"])


def _f(x: float) -> str:
    """Two decimals, without a negative zero."""
    return f"{round(x, 2) + 0.0:.2f}"


def _band(values: list[float]) -> str:
    return f"[{_f(min(values))}, {_f(max(values))}]"


def _layer(i: int | None) -> str:
    return "none" if i is None else str(i)


def _seed_max_rates(entry: dict[str, Any]) -> str:
    return _band([_max_rate(run) for run in entry["untrained"]["per_seed"]])


FIRST_TOKEN_KINDS = ("natural_bos", "natural_no_bos", "repeated_bos", "repeated_no_bos")


def _own_kind(kinds: dict[str, Any], base: str) -> str:
    """Which first-token kind the tokenizer's own `base` batch is ('bos' / 'no BOS' / '?')."""
    for kind in (f"{base}_bos", f"{base}_no_bos"):
        if kinds.get(kind, {}).get("same_tokens_as") == base:
            return "BOS" if kind.endswith("_bos") and not kind.endswith("no_bos") else "no BOS"
    return "?"


def claim_first_token(models: dict[str, Any]) -> tuple[str, str]:
    """(verdict, numbers) of (a): sinks on one repeated id iff the first token is a distinct BOS
    (FIRST_TOKEN_RULE), every causal model with the four first-token kinds."""
    parts, agree, tested = [], 0, 0
    for name, model in models.items():
        kinds = model["inputs"]
        if not model["model"].get("causal") or "repeated_bos" not in kinds:
            continue
        blocks = len(kinds["natural"]["trained"]["attention"]["sink_rate"])
        counts = {k: len(sink_blocks(kinds[k])) for k in FIRST_TOKEN_KINDS if k in kinds}
        tested += 1
        ok = counts["repeated_bos"] >= 1 and counts["repeated_no_bos"] == 0
        agree += ok
        parts.append(
            f"{short(name)} (tokenizer: {_own_kind(kinds, 'natural')}): sink blocks of {blocks}, "
            f"repeated id with BOS {counts['repeated_bos']}, without {counts['repeated_no_bos']}; "
            f"natural text with BOS {counts['natural_bos']}, without {counts['natural_no_bos']}; "
            f"max sink rate repeated with BOS {_max_rate(kinds['repeated_bos']['trained']):.2f}, "
            f"without {_max_rate(kinds['repeated_no_bos']['trained']):.2f} (untrained "
            f"{_seed_max_rates(kinds['repeated_bos'])}, "
            f"{_seed_max_rates(kinds['repeated_no_bos'])})")
    if not tested:
        return "not measured", "no causal model measured with and without a BOS"
    verdict = "holds" if agree == tested else "does not hold" if agree == 0 else "partly"
    return verdict, "; ".join(parts)


def _head_counts(run: dict[str, Any]) -> dict[str, Any]:
    """Pooled over blocks: sink heads, the carried ones (key 0), the carried ones for the control
    key (None without it), the heads that are not sink heads and the carried ones among them."""
    att = run["attention"]
    control = att.get("head_control_carried")
    out = {"sink": 0, "carried": 0, "control": 0 if control else None, "other": 0,
           "other_carried": 0}
    for b, (rate, qc) in enumerate(zip(att["head_sink_rate"], att["head_query_carried"])):
        for h, r in enumerate(rate):
            if math.isnan(_num(qc[h])):
                continue
            carried = _num(qc[h]) >= summary.CARRIED_MAJORITY
            if _num(r) > summary.SINK_HEAD_MAJORITY:
                out["sink"] += 1
                out["carried"] += carried
                if control:
                    out["control"] += _num(control[b][h]) >= summary.CARRIED_MAJORITY
            else:
                out["other"] += 1
                out["other_carried"] += carried
    return out


def _sink_head_counts(run: dict[str, Any]) -> tuple[int, int, float, float]:
    """(sink heads, carried ones, Σ shared, Σ excess over the sink heads), pooled over blocks."""
    heads = carried = 0
    shared = excess = 0.0
    att = run["attention"]
    for rate, qc, sh, ex in zip(att["head_sink_rate"], att["head_query_carried"],
                                att["head_shared"], att["head_excess"]):
        for h, r in enumerate(rate):
            if _num(r) > summary.SINK_HEAD_MAJORITY:
                heads += 1
                carried += _num(qc[h]) >= summary.CARRIED_MAJORITY
                shared, excess = shared + _num(sh[h]), excess + _num(ex[h])
    return heads, carried, shared, excess


def claim_b(models: dict[str, Any]) -> tuple[str, str]:
    """(verdict, numbers) of (b): sink heads' excess carried by the shared term, beside its two
    controls (CARRIED_RULE)."""
    parts, shares, causal_shares, close = [], [], [], False
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        heads, carried, shared, excess = _sink_head_counts(entry["trained"])
        counts = _head_counts(entry["trained"])
        untrained = sum(_sink_head_counts(run)[0] for run in entry["untrained"]["per_seed"])
        if heads == 0:
            parts.append(f"{short(name)}: no sink head (untrained: {untrained})")
            continue
        p = carried / heads
        shares.append(p)
        if model["model"]["causal"]:
            causal_shares.append(p)
        controls = []
        if counts["control"] is not None:
            controls.append(("random key, same heads", counts["control"], heads))
        if counts["other"]:
            controls.append(("key 0, non-sink heads", counts["other_carried"], counts["other"]))
        close |= any(c / n > p - CONTROL_MARGIN for _, c, n in controls)
        text = ", ".join(f"{label} {c}/{n} ({c / n:.2f})" for label, c, n in controls)
        parts.append(f"{short(name)}{' (causal)' if model['model']['causal'] else ''}: "
                     f"{carried}/{heads} carried (p = {p:.2f}); controls: "
                     f"{text or 'not measured'}; Σshared/Σexcess {shared / excess:.2f} "
                     f"(untrained sink heads over all seeds: {untrained})")
    low, high = CARRIED_SHARE
    if not shares:
        verdict = "not testable with these models"
    elif max(shares) < low:
        verdict = "does not hold"
    elif min(shares) >= high and not close:
        verdict = "holds"
    else:
        verdict = "partly"
    causal = (f"; causal models alone: p = {_band(causal_shares)}" if causal_shares
              else "; no causal model has a sink head")
    return verdict, "; ".join(parts) + causal


def pc_jump(states: dict[str, Any]) -> tuple[int | None, float]:
    """(state of the largest rise of the top-PC share, or None if it is < PC_JUMP; the rise)."""
    share = [_num(v) for v in states["top_pc_share"]]
    rises = [share[i] - share[i - 1] for i in range(1, len(share))]
    best = max(range(len(rises)), key=lambda i: rises[i])
    return (best + 1 if rises[best] >= PC_JUMP else None), rises[best]


def first_massive(states: dict[str, Any]) -> int | None:
    """The first state with an activation above 100 and 1,000× its sequence's median."""
    return next((i for i, c in enumerate(states["massive_count"]) if c), None)


def _agreement(pairs: list[tuple[int, int]]) -> str:
    if not pairs:
        return "not testable with these models"
    agree = sum(abs(a - b) <= SAME_LAYER for a, b in pairs)
    return "holds" if agree == len(pairs) else "does not hold" if agree == 0 else "partly"


def claim_c(models: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str]]:
    """((verdict, numbers) of (c1) sink block vs top-PC jump, of (c2) vs first massive state)."""
    pc_pairs, mass_pairs, pc_parts, mass_parts = [], [], [], []
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        sinks = sink_blocks(entry)
        jump, rise = pc_jump(entry["trained"]["states"])
        seed_rises = [pc_jump(run["states"])[1] for run in entry["untrained"]["per_seed"]]
        mass = first_massive(entry["trained"]["states"])
        ratio = max(_num(v) for v in entry["trained"]["states"]["massive_top_ratio"])
        first = sinks[0] if sinks else None
        pc_parts.append(f"{short(name)}: L_sink {_layer(first)}, L_pc {_layer(jump)} (largest "
                        f"rise {_f(rise)}; untrained {_band(seed_rises)})")
        mass_parts.append(f"{short(name)}: L_sink {_layer(first)}, L_mass {_layer(mass)} "
                          f"(largest top/median {ratio:.0f}×)")
        if first is not None and jump is not None:
            pc_pairs.append((first, jump))
        if first is not None and mass is not None:
            mass_pairs.append((first, mass))
    return ((_agreement(pc_pairs), "; ".join(pc_parts)),
            (_agreement(mass_pairs), "; ".join(mass_parts)))


def _collapses(states: dict[str, Any], pc_key: str = "top_pc_share"
               ) -> list[tuple[int, float, float, float, float]]:
    """[(state, pc, pc without first, cosine, cosine without first)] of the collapse states, by
    the top-PC share `pc_key` (or its unit-row form "top_pc_share_unit")."""
    out = []
    for i in range(1, len(states[pc_key])):
        pc, pc_wo = _num(states[pc_key][i]), _num(states[f"{pc_key}_without_first"][i])
        cos = _num(states["average_cosine"][i])
        cos_wo = _num(states["average_cosine_without_first"][i])
        if pc >= PC_PRESENT and pc_wo <= PC_COLLAPSE * pc:
            out.append((i, pc, pc_wo, cos, cos_wo))
    return out


def _largest_drop(states: dict[str, Any], pc_key: str = "top_pc_share") -> float:
    """The largest relative drop 1 − pc_without / pc over the states i ≥ 1."""
    return max(1 - _num(wo) / _num(pc) for pc, wo in zip(states[pc_key][1:],
                                                         states[f"{pc_key}_without_first"][1:]))


def claim_d(models: dict[str, Any], pc_key: str = "top_pc_share") -> tuple[str, str]:
    """(verdict, numbers) of (d): removing the first token collapses the top-PC share but not the
    average cosine (COLLAPSE_RULE), on the rows (`pc_key` "top_pc_share") or on the unit rows
    ("top_pc_share_unit": (d′), the models whose results have it)."""
    parts, collapse_states, kept = [], 0, 0
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        states = entry["trained"]["states"]
        if pc_key not in states:
            continue
        found = _collapses(states, pc_key)
        collapse_states += len(found)
        kept += sum(cos_wo >= COSINE_KEPT * cos for _, _, _, cos, cos_wo in found)
        seeds = _band([_largest_drop(run["states"], pc_key)
                       for run in entry["untrained"]["per_seed"]])
        text = (f"{short(name)}: largest top-PC drop {_f(_largest_drop(states, pc_key))} "
                f"(untrained {seeds})")
        if found:
            i, pc, pc_wo, cos, cos_wo = max(found, key=lambda f: f[1] - f[2])
            text += (f", {len(found)} collapse state(s), e.g. state {i}: top-PC {_f(pc)} → "
                     f"{_f(pc_wo)}, cosine {_f(cos)} → {_f(cos_wo)}")
        ratios = [_num(v) for v in states.get("first_token_norm_ratio", [])[1:]]
        if ratios and pc_key == "top_pc_share":
            text += (f"; first row's norm / the others' {min(ratios):.0f}–{max(ratios):.0f}× over "
                     f"the states i ≥ 1")
        parts.append(text)
    if not parts:
        return "not measured", f"no model's results have {pc_key}"
    if collapse_states == 0 or kept == 0:
        verdict = "does not hold"
    else:
        verdict = "holds" if kept == collapse_states else "partly"
    return verdict, "; ".join(parts)


def _anisotropy(run: dict[str, Any]) -> float:
    """Mean over the states i ≥ 1 (every block's output, and the final norm's) of the average
    cosine."""
    return float(np.mean([_num(v) for v in run["states"]["average_cosine"][1:]]))


def _largest_ratio(run: dict[str, Any]) -> float:
    return max(_num(v) for v in run["states"]["massive_top_ratio"][1:])


def _largest_activation(run: dict[str, Any]) -> float:
    """The largest |activation| over the states i ≥ 1."""
    return max(abs(_num(v)) for v in run["states"]["massive_top"][1:])


def claim_e(models: dict[str, Any]) -> tuple[str, str]:
    """(verdict, numbers) of (e): Gemma-3 (QK-norm) below SmolLM2 (none) in the share of sink
    blocks, the largest top/median |activation| ratio and the mean average cosine."""
    if GEMMA3 not in models or ROTARY not in models:
        return "not measured", f"needs both {SHORT[GEMMA3]} and {SHORT[ROTARY]}"
    got, parts = {}, []
    for name in (GEMMA3, ROTARY):
        entry = models[name]["inputs"]["natural"]
        blocks = len(entry["trained"]["attention"]["sink_rate"])
        seeds = entry["untrained"]["per_seed"]
        got[name] = (len(sink_blocks(entry)) / blocks, _largest_ratio(entry["trained"]),
                     _largest_activation(entry["trained"]), _anisotropy(entry["trained"]))
        parts.append(f"{short(name)}: sink blocks {len(sink_blocks(entry))}/{blocks} "
                     f"({_f(got[name][0])}), largest top/median {got[name][1]:.0f}× (untrained "
                     f"{min(map(_largest_ratio, seeds)):.0f}–{max(map(_largest_ratio, seeds)):.0f}"
                     f"×), largest |activation| {got[name][2]:.3g} (untrained "
                     f"{min(map(_largest_activation, seeds)):.3g}–"
                     f"{max(map(_largest_activation, seeds)):.3g}), mean cosine "
                     f"{_f(got[name][3])} (untrained {_band([_anisotropy(r) for r in seeds])})")
    g, r = got[GEMMA3], got[ROTARY]
    lower = (g[0] < r[0]) + (g[1] < r[1] and g[2] < r[2]) + (g[3] < r[3])
    parts.append(f"largest |activation| {short(GEMMA3)} / {short(ROTARY)} = {g[2] / r[2]:.1f}, "
                 f"top/median {g[1] / r[1]:.2f}")
    verdict = "holds" if lower == 3 else "does not hold" if lower == 0 else "partly"
    return verdict, "; ".join(parts) + f"; {SHORT[GEMMA3]} lower on {lower} of 3"


CLAIMS = ("(a) the first token: sinks on one repeated id with a distinct first token (BOS) and "
          "none without it, in every causal model (Gu et al.'s 'no sinks on repeated tokens', "
          "restated)",
          "(b) a sink head's logit excess is carried by the shared term q̄·(k_sink − k̄), and "
          "less so for a random key (same heads) or for key 0 in non-sink heads",
          "(c1) the first sink block and the top-PC jump are the same layer (±1)",
          "(c2) the first sink block and the first massive activation are the same layer (±1)",
          "(d) removing the first (BOS/[CLS]) token collapses the top-PC share, not the cosine "
          "(variance-weighted: the first rows' norms are most of it)",
          "(d′) (d) on the unit rows x/‖x‖ (the norm weighting removed)",
          "(e) QK-norm (Gemma-3) has fewer sink blocks, smaller massive activations (ratio and "
          "absolute size) and a lower cosine than no QK-norm (SmolLM2)")
RULES = (FIRST_TOKEN_RULE, CARRIED_RULE,
         f"L_sink (first sink block) and L_pc (largest rise ≥ {PC_JUMP} of the top-PC share) "
         f"within ±{SAME_LAYER}: holds in every model with both, does not hold in none",
         f"L_sink and L_mass (first state with |a| > 100 and > 1,000× the median) within "
         f"±{SAME_LAYER}", COLLAPSE_RULE, COLLAPSE_RULE, MASSIVE_RULE)


def rows(models: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(claim, verdict, numbers) of every row."""
    c1, c2 = claim_c(models)
    got = [claim_first_token(models), claim_b(models), c1, c2, claim_d(models),
           claim_d(models, "top_pc_share_unit"), claim_e(models)]
    return [(claim, verdict, numbers) for claim, (verdict, numbers) in zip(CLAIMS, got)]


def table(folder: str | pathlib.Path) -> str:
    """The markdown table of `rows` over the results under `folder`."""
    models = load(folder)
    lines = ["| claim | rule | verdict | measured (natural inputs unless named; trained = one "
             "network; untrained = [min, max] over the seeds) |", "|---|---|---|---|"]
    lines += [f"| {claim} | {rule} | **{verdict}** | {numbers} |" for (claim, verdict, numbers),
              rule in zip(rows(models), RULES)]
    lines.append(f"\nModels: {', '.join(short(n) for n in models)}.")
    return "\n".join(lines) + "\n"
