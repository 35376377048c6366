"""Verdicts of the extreme-token claims (a)–(e) from committed extreme-token results; the table
that docs/REPORT.md embeds, with each row's sensitivity entry, is `sensitivity.table`.

The thresholds are those pre-registered in docs/EXTREME.md ("Pre-registered claims and
thresholds"); the rows were restated after review (docs/EXTREME.md, "Restated claims"), each
with its rule as a constant (FIRST_TOKEN_RULE, CARRIED_RULE, COLLAPSE_RULE, MASSIVE_RULE) that
the table prints: (a) and the former (a′) are one claim about the first token, tested with and
without a BOS on every causal model; (b) has two controls; (d) has its norm-weighting caveat and
the unit-row row (d′); (e) counts massive activations by ratio and absolute size.

`load(folder)` (loading.py) merges the models of every results.json under `folder`; `rows(models)` gives
(claim, verdict, numbers) per row. Each claim function takes its rule's constants as keyword
parameters (defaults: the rules' values), which `sensitivity` varies.
"Trained" is one network; the untrained numbers are the range (min–max) over the re-initialised
seeds, the only interval quoted: no statistic is computed over the layers or heads of one network
as if they were independent samples.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from anisotropy_jax.configs.extreme import GEMMA3, QWEN25_CODER
from anisotropy_jax.studies.extreme import summary
from anisotropy_jax.studies.extreme.loading import load  # noqa: F401 (re-exported)
from anisotropy_jax.studies.extreme.rules import (CARRIED_SHARE, CLAIMS, CONTROL_MARGIN,
                                                   COSINE_KEPT, MASSIVE_ABS, PC_COLLAPSE, PC_JUMP,
                                                   PC_PRESENT, ROTARY, SAME_LAYER,
                                                   SINK_BLOCK_RATE)

SHORT = {GEMMA3: "Gemma-3", "all-MiniLM-L6-v2": "MiniLM-L6", "paraphrase-MiniLM-L3-v2": "MiniLM-L3",
         "all-mpnet-base-v2": "MPNet", "SmolLM2-135M-Instruct": "SmolLM2",
         "Whisper-tiny.en": "Whisper-tiny", "Whisper-base": "Whisper-base", "DINOv2-S": "DINOv2-S",
         **{name: name.removesuffix("-Instruct") for name in QWEN25_CODER.values()}}


def short(name: str) -> str:
    return SHORT.get(name, name)


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


def sink_blocks(entry: dict[str, Any], block_rate: float = SINK_BLOCK_RATE) -> list[int]:
    """Blocks (1-based: block i makes state i) whose trained sink rate is > `block_rate` and
    above the maximum over the untrained seeds."""
    rates = entry["trained"]["attention"]["sink_rate"]
    ceiling = entry["untrained"]["max"]["attention"]["sink_rate"]
    return [i + 1 for i, (r, c) in enumerate(zip(rates, ceiling))
            if _num(r) > block_rate and _num(r) > _num(c)]


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


def _own_kind(kinds: dict[str, Any]) -> str:
    """'BOS' / 'no BOS' / '?': the first-token kind that reused its run's own batch."""
    for base in ("repeated", "natural"):
        for kind in (f"{base}_bos", f"{base}_no_bos"):
            if kinds.get(kind, {}).get("same_tokens_as") == base:
                return "no BOS" if kind.endswith("no_bos") else "BOS"
    return "?"


def _first_token_text(name: str, kinds: dict[str, Any], counts: dict[str, int]) -> str:
    blocks = len(kinds["repeated_bos"]["trained"]["attention"]["sink_rate"])
    natural = (f"natural text with BOS {counts['natural_bos']}, without "
               f"{counts['natural_no_bos']}" if {"natural_bos", "natural_no_bos"} <= set(counts)
               else "natural text with and without a BOS not measured")
    return (f"{short(name)} (tokenizer: {_own_kind(kinds)}): sink blocks of {blocks}, "
            f"repeated id with BOS {counts['repeated_bos']}, without {counts['repeated_no_bos']}; "
            f"{natural}; max sink rate repeated with BOS "
            f"{_max_rate(kinds['repeated_bos']['trained']):.2f}, without "
            f"{_max_rate(kinds['repeated_no_bos']['trained']):.2f} (untrained "
            f"{_seed_max_rates(kinds['repeated_bos'])}, "
            f"{_seed_max_rates(kinds['repeated_no_bos'])})")


def claim_first_token(models: dict[str, Any], block_rate: float = SINK_BLOCK_RATE,
                      min_blocks: int = 1, max_without: int = 0) -> tuple[str, str]:
    """(verdict, numbers) of (a): sinks on one repeated id iff the first token is a distinct BOS
    (FIRST_TOKEN_RULE: ≥ `min_blocks` sink blocks with it, ≤ `max_without` without), every
    causal model measured on the repeated id with and without a BOS."""
    parts, agree, tested = [], 0, 0
    for name, model in models.items():
        kinds = model["inputs"]
        if not model["model"].get("causal") or not {"repeated_bos", "repeated_no_bos"} <= set(
                kinds):
            continue
        counts = {k: len(sink_blocks(kinds[k], block_rate)) for k in FIRST_TOKEN_KINDS
                  if k in kinds}
        tested += 1
        agree += counts["repeated_bos"] >= min_blocks and counts["repeated_no_bos"] <= max_without
        parts.append(_first_token_text(name, kinds, counts))
    if not tested:
        return "not measured", "no causal model measured with and without a BOS"
    verdict = "holds" if agree == tested else "does not hold" if agree == 0 else "partly"
    return verdict, "; ".join(parts)


def _head_counts(run: dict[str, Any], majority: float = summary.CARRIED_MAJORITY
                 ) -> dict[str, Any]:
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
            carried = _num(qc[h]) >= majority
            if _num(r) > summary.SINK_HEAD_MAJORITY:
                out["sink"] += 1
                out["carried"] += carried
                if control:
                    out["control"] += _num(control[b][h]) >= majority
            else:
                out["other"] += 1
                out["other_carried"] += carried
    return out


def _sink_head_counts(run: dict[str, Any], majority: float = summary.CARRIED_MAJORITY
                      ) -> tuple[int, int, float, float]:
    """(sink heads, carried ones, Σ shared, Σ excess over the sink heads), pooled over blocks."""
    heads = carried = 0
    shared = excess = 0.0
    att = run["attention"]
    for rate, qc, sh, ex in zip(att["head_sink_rate"], att["head_query_carried"],
                                att["head_shared"], att["head_excess"]):
        for h, r in enumerate(rate):
            if _num(r) > summary.SINK_HEAD_MAJORITY:
                heads += 1
                carried += _num(qc[h]) >= majority
                shared, excess = shared + _num(sh[h]), excess + _num(ex[h])
    return heads, carried, shared, excess


def claim_b(models: dict[str, Any], shares_at: tuple[float, float] = CARRIED_SHARE,
            margin: float | None = CONTROL_MARGIN,
            majority: float = summary.CARRIED_MAJORITY) -> tuple[str, str]:
    """(verdict, numbers) of (b): sink heads' excess carried by the shared term, beside its two
    controls (CARRIED_RULE: p against `shares_at`, each control ≤ p − `margin`; None: the
    controls are not decided on, the pre-registered rule); a head is carried at ≥ `majority` of
    its queries."""
    parts, shares, causal_shares, close = [], [], [], False
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        heads, carried, shared, excess = _sink_head_counts(entry["trained"], majority)
        counts = _head_counts(entry["trained"], majority)
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
        close |= margin is not None and any(c / n > p - margin for _, c, n in controls)
        text = ", ".join(f"{label} {c}/{n} ({c / n:.2f})" for label, c, n in controls)
        parts.append(f"{short(name)}{' (causal)' if model['model']['causal'] else ''}: "
                     f"{carried}/{heads} carried (p = {p:.2f}); controls: "
                     f"{text or 'not measured'}; Σshared/Σexcess {shared / excess:.2f} "
                     f"(untrained sink heads over all seeds: {untrained})")
    low, high = shares_at
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


def pc_jump(states: dict[str, Any], first_rise: float | None = None) -> tuple[int | None, float]:
    """(state of the largest rise of the top-PC share, or None if it is < PC_JUMP; the rise).
    With `first_rise`, the marker is the first state whose rise is ≥ it (None if none is)."""
    share = [_num(v) for v in states["top_pc_share"]]
    rises = [share[i] - share[i - 1] for i in range(1, len(share))]
    best = max(range(len(rises)), key=lambda i: rises[i])
    if first_rise is not None:
        return next((i + 1 for i, r in enumerate(rises) if r >= first_rise), None), rises[best]
    return (best + 1 if rises[best] >= PC_JUMP else None), rises[best]


def first_massive(states: dict[str, Any]) -> int | None:
    """The first state with an activation above 100 and 1,000× its sequence's median."""
    return next((i for i, c in enumerate(states["massive_count"]) if c), None)


def first_massive_at(massive: dict[str, Any], cut: float) -> int | None:
    """The first state one of whose stored top-k activations (the run's "massive": the k largest
    |a| of each state, with their ratios to their sequence's median) is above MASSIVE_ABS and
    `cut`× its median: `first_massive` under another cut, as far as the top k show it."""
    for i, (values, ratios) in enumerate(zip(massive["top_values"], massive["top_ratio"])):
        if any(abs(_num(v)) > MASSIVE_ABS and _num(r) > cut for v, r in zip(values, ratios)):
            return i
    return None


def _agreement(pairs: list[tuple[int, int]], same_layer: int = SAME_LAYER) -> str:
    if not pairs:
        return "not testable with these models"
    agree = sum(abs(a - b) <= same_layer for a, b in pairs)
    return "holds" if agree == len(pairs) else "does not hold" if agree == 0 else "partly"


def claim_c(models: dict[str, Any], block_rate: float = SINK_BLOCK_RATE,
            first_rise: float | None = None, cut: float | None = None,
            same_layer: int = SAME_LAYER) -> tuple[tuple[str, str], tuple[str, str]]:
    """((verdict, numbers) of (c1) sink block vs top-PC jump, of (c2) vs first massive state);
    markers: `first_rise` (`pc_jump`), `cut` (`first_massive_at`; None: the study's count)."""
    pc_pairs, mass_pairs, pc_parts, mass_parts = [], [], [], []
    if cut is not None and any("massive" not in m["inputs"]["natural"]["trained"]
                               for m in models.values()):  # no top activations stored
        return claim_c(models, block_rate, first_rise, None, same_layer)[0], ("not measured", "")
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        sinks = sink_blocks(entry, block_rate)
        jump, rise = pc_jump(entry["trained"]["states"], first_rise)
        seed_rises = [pc_jump(run["states"])[1] for run in entry["untrained"]["per_seed"]]
        mass = (first_massive(entry["trained"]["states"]) if cut is None
                else first_massive_at(entry["trained"]["massive"], cut))
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
    return ((_agreement(pc_pairs, same_layer), "; ".join(pc_parts)),
            (_agreement(mass_pairs, same_layer), "; ".join(mass_parts)))


def _collapses(states: dict[str, Any], pc_key: str = "top_pc_share", present: float = PC_PRESENT,
               collapse: float = PC_COLLAPSE) -> list[tuple[int, float, float, float, float]]:
    """[(state, pc, pc without first, cosine, cosine without first)] of the collapse states, by
    the top-PC share `pc_key` (or its unit-row form "top_pc_share_unit"): pc ≥ `present`, and
    pc without the first token ≤ `collapse` × pc."""
    out = []
    for i in range(1, len(states[pc_key])):
        pc, pc_wo = _num(states[pc_key][i]), _num(states[f"{pc_key}_without_first"][i])
        cos = _num(states["average_cosine"][i])
        cos_wo = _num(states["average_cosine_without_first"][i])
        if pc >= present and pc_wo <= collapse * pc:
            out.append((i, pc, pc_wo, cos, cos_wo))
    return out


def _largest_drop(states: dict[str, Any], pc_key: str = "top_pc_share") -> float:
    """The largest relative drop 1 − pc_without / pc over the states i ≥ 1."""
    return max(1 - _num(wo) / _num(pc) for pc, wo in zip(states[pc_key][1:],
                                                         states[f"{pc_key}_without_first"][1:]))


def claim_d(models: dict[str, Any], pc_key: str = "top_pc_share", present: float = PC_PRESENT,
            collapse: float = PC_COLLAPSE, cosine_kept: float = COSINE_KEPT) -> tuple[str, str]:
    """(verdict, numbers) of (d): removing the first token collapses the top-PC share but not the
    average cosine (COLLAPSE_RULE, its constants `present`, `collapse`, `cosine_kept`), on the
    rows (`pc_key` "top_pc_share") or on the unit rows ("top_pc_share_unit": (d′), the models
    whose results have it)."""
    parts, collapse_states, kept = [], 0, 0
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        states = entry["trained"]["states"]
        if pc_key not in states:
            continue
        found = _collapses(states, pc_key, present, collapse)
        collapse_states += len(found)
        kept += sum(cos_wo >= cosine_kept * cos for _, _, _, cos, cos_wo in found)
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


def claim_e(models: dict[str, Any], block_rate: float = SINK_BLOCK_RATE,
            size: tuple[str, ...] = ("ratio", "absolute")) -> tuple[str, str]:
    """(verdict, numbers) of (e): Gemma-3 (QK-norm) below SmolLM2 (none) in the share of sink
    blocks (at `block_rate`), the size of its massive activations (smaller by every measure of
    `size`: "ratio", the largest top/median, and "absolute", the largest |activation|) and the
    mean average cosine."""
    if GEMMA3 not in models or ROTARY not in models:
        return "not measured", f"needs both {SHORT[GEMMA3]} and {SHORT[ROTARY]}"
    got, parts = {}, []
    for name in (GEMMA3, ROTARY):
        entry = models[name]["inputs"]["natural"]
        blocks = len(entry["trained"]["attention"]["sink_rate"])
        seeds = entry["untrained"]["per_seed"]
        got[name] = (len(sink_blocks(entry, block_rate)) / blocks,
                     _largest_ratio(entry["trained"]),
                     _largest_activation(entry["trained"]), _anisotropy(entry["trained"]))
        parts.append(f"{short(name)}: sink blocks {len(sink_blocks(entry, block_rate))}/{blocks} "
                     f"({_f(got[name][0])}), largest top/median {got[name][1]:.0f}× (untrained "
                     f"{min(map(_largest_ratio, seeds)):.0f}–{max(map(_largest_ratio, seeds)):.0f}"
                     f"×), largest |activation| {got[name][2]:.3g} (untrained "
                     f"{min(map(_largest_activation, seeds)):.3g}–"
                     f"{max(map(_largest_activation, seeds)):.3g}), mean cosine "
                     f"{_f(got[name][3])} (untrained {_band([_anisotropy(r) for r in seeds])})")
    g, r = got[GEMMA3], got[ROTARY]
    smaller = all({"ratio": g[1] < r[1], "absolute": g[2] < r[2]}[k] for k in size)
    lower = (g[0] < r[0]) + smaller + (g[3] < r[3])
    parts.append(f"largest |activation| {short(GEMMA3)} / {short(ROTARY)} = {g[2] / r[2]:.1f}, "
                 f"top/median {g[1] / r[1]:.2f}")
    verdict = "holds" if lower == 3 else "does not hold" if lower == 0 else "partly"
    return verdict, "; ".join(parts) + f"; {SHORT[GEMMA3]} lower on {lower} of 3"


def rows(models: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(claim, verdict, numbers) of every row."""
    c1, c2 = claim_c(models)
    got = [claim_first_token(models), claim_b(models), c1, c2, claim_d(models),
           claim_d(models, "top_pc_share_unit"), claim_e(models)]
    return [(claim, verdict, numbers) for claim, (verdict, numbers) in zip(CLAIMS, got)]
