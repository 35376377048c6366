"""The sensitivity entry of every extreme-token claim and the table that docs/REPORT.md embeds
(`anisotropy_jax.doc_tables` kind `extreme_claims`): each row of `claims.rows` recomputed from
the same results under other choices of the constants its rule depends on (ALTERNATIVES: the
sink-block rate, the carried-share thresholds and the controls' margin, the markers of (c) —
the largest rise of the top-PC share against the first rise ≥ x, the 1,000× massive cut against
800× and 100× —, the layers' tolerance, the collapse thresholds of (d), the measure of size in
(e)), and printed as "robust" or "flips under …" (`entry`, the wording of the report's sensitivity
column: studies/report/verdict.py `sensitivity_entry`, which this study may not import)."""
from __future__ import annotations

import pathlib
from typing import Any, Callable

from anisotropy_jax.studies.extreme import claims
from anisotropy_jax.studies.extreme.rules import CLAIMS, RULES

NOT_MEASURED = "not measured"
BLOCK_RATES = {"sink blocks at rate > 0.3": {"block_rate": 0.3},
               "sink blocks at rate > 0.7": {"block_rate": 0.7}}
LAYERS = {"the same layer (±0)": {"same_layer": 0}, "within ±2 layers": {"same_layer": 2}}
COLLAPSE = {"a top PC from share ≥ 0.1": {"present": 0.1},
            "a top PC from share ≥ 0.5": {"present": 0.5},
            "collapsed at ≤ 0.25×": {"collapse": 0.25}, "collapsed at ≤ 0.75×": {"collapse": 0.75},
            "cosine kept at ≥ 0.5×": {"cosine_kept": 0.5},
            "cosine kept at ≥ 0.9×": {"cosine_kept": 0.9}}
# {row: {label: the claim function's constants under that alternative}}, rows in CLAIMS' order
ALTERNATIVES: dict[str, dict[str, dict[str, Any]]] = {
    "(a)": {**BLOCK_RATES, "≥ 3 sink blocks with the BOS": {"min_blocks": 3},
            "≤ 2 sink blocks without it": {"max_without": 2}},
    "(b)": {"controls within 0.1 of p": {"margin": 0.1},
            "controls within 0.4 of p": {"margin": 0.4},
            "no control decided on (the pre-registered rule)": {"margin": None},
            "holds from p ≥ 0.9": {"shares_at": (0.5, 0.9)},
            "a head carried at ≥ 3/4 of its queries": {"majority": 0.75}},
    "(c1)": {**BLOCK_RATES, "L_pc the first rise ≥ 0.5": {"first_rise": 0.5},
             "L_pc the first rise ≥ 0.2": {"first_rise": 0.2}, **LAYERS},
    "(c2)": {**BLOCK_RATES, "massive at 800×": {"cut": 800.0},
             "massive at 100× (Sun et al.'s lower cut)": {"cut": 100.0}, **LAYERS},
    "(d)": COLLAPSE,
    "(d′)": COLLAPSE,
    "(e)": {**BLOCK_RATES, "size by the top/median ratio alone (the pre-registered rule)":
            {"size": ("ratio",)}, "size by the largest |activation| alone": {"size": ("absolute",)}},
}


def _claim_c(index: int) -> Callable[..., tuple[str, str]]:
    return lambda models, **k: claims.claim_c(models, **k)[index]


RULE_FUNCTIONS: dict[str, Callable[..., tuple[str, str]]] = {
    "(a)": claims.claim_first_token, "(b)": claims.claim_b, "(c1)": _claim_c(0),
    "(c2)": _claim_c(1), "(d)": claims.claim_d,
    "(d′)": lambda models, **k: claims.claim_d(models, "top_pc_share_unit", **k),
    "(e)": claims.claim_e}


def entry(verdict: str, alternatives: dict[str, str]) -> str:
    """"–" (not measured), "robust (A, B, …)" when every alternative gives `verdict`, else
    "flips under A (→ partly); …; the same under B, …"; an alternative the results cannot decide
    ("not measured") is named apart and counts as no flip."""
    if verdict == NOT_MEASURED or not alternatives:
        return "–"
    flips = [f"{label} (→ {v})" for label, v in alternatives.items()
             if v not in (verdict, NOT_MEASURED)]
    same = [label for label, v in alternatives.items() if v == verdict]
    unknown = [label for label, v in alternatives.items() if v == NOT_MEASURED]
    parts = (["flips under " + "; ".join(flips)] + ([f"the same under {', '.join(same)}"]
                                                     if same else [])
             if flips else [f"robust ({', '.join(same)})"] if same else [])
    if unknown:
        parts.append(f"not recomputable from these results under {', '.join(unknown)}")
    return "; ".join(parts)


def row_key(claim: str) -> str:
    """'(a)', '(c1)', … of a row of CLAIMS."""
    return claim.split(" ", 1)[0]


def sensitivity(models: dict[str, Any], key: str) -> dict[str, str]:
    """{alternative: the verdict of row `key` under it}."""
    rule = RULE_FUNCTIONS[key]
    return {label: rule(models, **alt)[0] for label, alt in ALTERNATIVES[key].items()}


def rows(models: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(claim, verdict, sensitivity entry, numbers) of every row."""
    out = []
    for claim, verdict, numbers in claims.rows(models):
        out.append((claim, verdict, entry(verdict, sensitivity(models, row_key(claim))),
                    numbers))
    return out


def table(folder: str | pathlib.Path) -> str:
    """The markdown table of `rows` over the results under `folder`."""
    models = claims.load(folder)
    lines = ["| claim | rule | verdict | sensitivity | measured (natural inputs unless named; "
             "trained = one network; untrained = [min, max] over the seeds) |",
             "|---|---|---|---|---|"]
    lines += [f"| {claim} | {rule} | **{verdict}** | {sens} | {numbers} |"
              for (claim, verdict, sens, numbers), rule in zip(rows(models), RULES)]
    lines.append(f"\nModels: {', '.join(claims.short(n) for n in models)}.")
    return "\n".join(lines) + "\n"


assert [row_key(c) for c in CLAIMS] == list(ALTERNATIVES) == list(RULE_FUNCTIONS)
