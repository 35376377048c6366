"""Verdicts of the extreme-token claims (a)–(e) from committed extreme-token results, with the thresholds
pre-registered in docs/EXTREME.md ("Pre-registered claims and thresholds"), and the table
that docs/REPORT.md embeds (`anisotropy_jax.doc_tables` kind `extreme_claims`).

`load(folder)` merges the models of every results.json under `folder` (one run per model, or one
run of all); `rows(models)` gives (claim, verdict, numbers) per row; `table(folder)` the markdown.
"Trained" is one network; the untrained numbers are the range (min–max) over the re-initialised
seeds, the only interval quoted: no statistic is computed over the layers or heads of one network
as if they were independent samples.
"""
from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.configs.extreme import EXTREME_MODELS, GEMMA3
from anisotropy_jax.studies.extreme import summary

SINK_BLOCK_RATE = 0.5     # a sink block: trained sink rate above this and above every seed's
CARRIED_SHARE = (0.5, 0.75)  # (b): p < 0.5 in every model: does not hold; ≥ 0.75 in every: holds
PC_JUMP = 0.1             # (c): the largest rise of the top-PC share counts if at least this
SAME_LAYER = 1            # (c): two markers agree within this many layers
PC_PRESENT = 0.2          # (d): a top PC to collapse: share at least this
PC_COLLAPSE = 0.5         # (d): collapsed: share without the first token ≤ this × the share
COSINE_KEPT = 0.75        # (d): kept: cosine without the first token ≥ this × the cosine
ROTARY = "SmolLM2-135M-Instruct"  # (a)'s model, and (e)'s model without QK-norm
SHORT = {GEMMA3: "Gemma-3", "all-MiniLM-L6-v2": "MiniLM-L6", "paraphrase-MiniLM-L3-v2": "MiniLM-L3",
         "all-mpnet-base-v2": "MPNet", "SmolLM2-135M-Instruct": "SmolLM2",
         "Whisper-tiny.en": "Whisper-tiny", "Whisper-base": "Whisper-base", "DINOv2-S": "DINOv2-S"}


def load(folder: str | pathlib.Path) -> dict[str, dict[str, Any]]:
    """{model name: its results.json entry} over every results.json under `folder`, in the order
    of EXTREME_MODELS."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(pathlib.Path(folder).rglob("results.json")):
        found.update(results.read_results(path)["models"])
    return {name: found[name] for name in EXTREME_MODELS if name in found}


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


def claim_a(models: dict[str, Any], rotary: str = ROTARY) -> tuple[str, str]:
    """(verdict, numbers) of (a) on the rotary model `rotary`: sinks on natural text vs one
    repeated token."""
    parts = []
    for name, model in models.items():
        kinds = model["inputs"]
        if "repeated" not in kinds:
            continue
        counts = {kind: len(sink_blocks(kinds[kind])) for kind in kinds}
        blocks = len(kinds["natural"]["trained"]["attention"]["sink_rate"])
        parts.append(f"{SHORT[name]}: sink blocks natural {counts['natural']}/{blocks}, "
                     + ", ".join(f"{k} {counts[k]}" for k in kinds if k != "natural")
                     + f"; max sink rate natural {_max_rate(kinds['natural']['trained']):.2f}, "
                     f"repeated {_max_rate(kinds['repeated']['trained']):.2f} (untrained "
                     f"{_seed_max_rates(kinds['natural'])}, "
                     f"{_seed_max_rates(kinds['repeated'])})")
    if rotary not in models:
        return "not measured", "; ".join([f"{SHORT[rotary]} not measured"] + parts)
    kinds = models[rotary]["inputs"]
    natural, repeated = len(sink_blocks(kinds["natural"])), len(sink_blocks(kinds["repeated"]))
    if natural >= 1 and repeated == 0:
        verdict = "holds"
    elif natural >= 1 and 2 * repeated < natural:
        verdict = "partly"
    else:
        verdict = "does not hold"
    return verdict, "; ".join(parts)


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
    """(verdict, numbers) of (b): sink heads' excess carried by the shared term."""
    parts, shares, causal_shares = [], [], []
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        heads, carried, shared, excess = _sink_head_counts(entry["trained"])
        untrained = sum(_sink_head_counts(run)[0] for run in entry["untrained"]["per_seed"])
        if heads == 0:
            parts.append(f"{SHORT[name]}: no sink head (untrained: {untrained})")
            continue
        shares.append(carried / heads)
        if model["model"]["causal"]:
            causal_shares.append(carried / heads)
        parts.append(f"{SHORT[name]}{' (causal)' if model['model']['causal'] else ''}: "
                     f"{carried}/{heads} carried (p = {carried / heads:.2f}), Σshared/Σexcess "
                     f"{shared / excess:.2f} (untrained sink heads over all seeds: {untrained})")
    low, high = CARRIED_SHARE
    if not shares:
        verdict = "not testable with these models"
    elif min(shares) >= high:
        verdict = "holds"
    elif max(shares) < low:
        verdict = "does not hold"
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
        pc_parts.append(f"{SHORT[name]}: L_sink {_layer(first)}, L_pc {_layer(jump)} (largest "
                        f"rise {_f(rise)}; untrained {_band(seed_rises)})")
        mass_parts.append(f"{SHORT[name]}: L_sink {_layer(first)}, L_mass {_layer(mass)} "
                          f"(largest top/median {ratio:.0f}×)")
        if first is not None and jump is not None:
            pc_pairs.append((first, jump))
        if first is not None and mass is not None:
            mass_pairs.append((first, mass))
    return ((_agreement(pc_pairs), "; ".join(pc_parts)),
            (_agreement(mass_pairs), "; ".join(mass_parts)))


def _collapses(states: dict[str, Any]) -> list[tuple[int, float, float, float, float]]:
    """[(state, pc, pc without first, cosine, cosine without first)] of the collapse states."""
    out = []
    for i in range(1, len(states["top_pc_share"])):
        pc, pc_wo = _num(states["top_pc_share"][i]), _num(states["top_pc_share_without_first"][i])
        cos = _num(states["average_cosine"][i])
        cos_wo = _num(states["average_cosine_without_first"][i])
        if pc >= PC_PRESENT and pc_wo <= PC_COLLAPSE * pc:
            out.append((i, pc, pc_wo, cos, cos_wo))
    return out


def _largest_drop(states: dict[str, Any]) -> float:
    """The largest relative drop 1 − pc_without / pc over the states i ≥ 1."""
    return max(1 - _num(wo) / _num(pc) for pc, wo in zip(states["top_pc_share"][1:],
                                                         states["top_pc_share_without_first"][1:]))


def claim_d(models: dict[str, Any]) -> tuple[str, str]:
    """(verdict, numbers) of (d): removing the first token collapses the top-PC share but not the
    average cosine."""
    parts, collapse_states, kept = [], 0, 0
    for name, model in models.items():
        entry = model["inputs"]["natural"]
        states = entry["trained"]["states"]
        found = _collapses(states)
        collapse_states += len(found)
        kept += sum(cos_wo >= COSINE_KEPT * cos for _, _, _, cos, cos_wo in found)
        seeds = _band([_largest_drop(run["states"]) for run in entry["untrained"]["per_seed"]])
        text = f"{SHORT[name]}: largest top-PC drop {_f(_largest_drop(states))} (untrained {seeds})"
        if found:
            i, pc, pc_wo, cos, cos_wo = max(found, key=lambda f: f[1] - f[2])
            text += (f", {len(found)} collapse state(s), e.g. state {i}: top-PC {_f(pc)} → "
                     f"{_f(pc_wo)}, cosine {_f(cos)} → {_f(cos_wo)}")
        parts.append(text)
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
                     _anisotropy(entry["trained"]))
        parts.append(f"{SHORT[name]}: sink blocks {len(sink_blocks(entry))}/{blocks} "
                     f"({_f(got[name][0])}), largest top/median {got[name][1]:.0f}× (untrained "
                     f"{min(map(_largest_ratio, seeds)):.0f}–{max(map(_largest_ratio, seeds)):.0f}"
                     f"×), mean cosine {_f(got[name][2])} (untrained "
                     f"{_band([_anisotropy(r) for r in seeds])})")
    lower = sum(g < s for g, s in zip(got[GEMMA3], got[ROTARY]))
    verdict = "holds" if lower == 3 else "does not hold" if lower == 0 else "partly"
    return verdict, "; ".join(parts) + f"; {SHORT[GEMMA3]} lower on {lower} of 3"


CLAIMS = ("(a) sinks on natural text, none on one repeated token (Gu et al., rotary SmolLM2)",
          "(b) a sink head's logit excess is carried by the shared term q̄·(k_sink − k̄)",
          "(c1) the first sink block and the top-PC jump are the same layer (±1)",
          "(c2) the first sink block and the first massive activation are the same layer (±1)",
          "(d) removing the first (BOS/[CLS]) token collapses the top-PC share, not the cosine",
          "(e) QK-norm (Gemma-3) has fewer sink blocks, smaller massive activations and a lower "
          "cosine than no QK-norm (SmolLM2)",
          "(a′) (a) on Gemma-3, the second rotary model")


def rows(models: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(claim, verdict, numbers) of every row."""
    c1, c2 = claim_c(models)
    got = [claim_a(models), claim_b(models), c1, c2, claim_d(models), claim_e(models),
           claim_a({n: m for n, m in models.items() if n == GEMMA3}, GEMMA3)]
    return [(claim, verdict, numbers) for claim, (verdict, numbers) in zip(CLAIMS, got)]


def table(folder: str | pathlib.Path) -> str:
    """The markdown table of `rows` over the results under `folder`."""
    models = load(folder)
    lines = ["| claim | verdict | measured (natural inputs unless named; trained = one network; "
             "untrained = [min, max] over the seeds) |", "|---|---|---|"]
    lines += [f"| {claim} | **{verdict}** | {numbers} |" for claim, verdict, numbers in
              rows(models)]
    lines.append(f"\nModels: {', '.join(SHORT[n] for n in models)}.")
    return "\n".join(lines) + "\n"
