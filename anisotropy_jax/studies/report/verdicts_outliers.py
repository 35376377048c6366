"""What makes the outliers: four accounts of where massive activations, sinks and anisotropy come
from, each a prediction on the arms of the normalisation grid's `outliers` variant (optimiser ×
norm gain × norm position, softmax attention, ≥ 5 seeds), fixed before the runs.

The input of every rule is `arms`: {dataset: {arm: [run, …]}}, one run per seed, a run being
{"steps": [S], "series": {metric: [S values, one per analysed checkpoint]}} (the grid's per-run
record). The seeds are the independent units: intervals are over seeds (Student t), differences
between two arms are Welch intervals (independent runs). Every rule is first gated by the
positive control: the AdamW / per-channel γ / pre-LN arm must show massive activations and sinks
in every seed, else the dataset says the regime was not reached and makes no claim.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.metrics.correlation import spearman, t_interval as _t_interval
from anisotropy_jax.studies.report.verdict import (FAILS, HOLDS, NOT_MEASURED, NOT_TESTABLE,
                                                    PARTLY, Verdict, g)

BASELINE = "adamw"  # AdamW, per-channel γ, pre-LN, softmax: today's training step
OPTIMIZER_ARMS = ("adamw", "muon", "sgd", "adamw_rotated")
GAIN_ARMS = ("single_gain", "no_gain")
ROTATION_ARMS = ("muon", "adamw_rotated")  # the optimisers without Adam's per-dimension basis
POST_LN = "post_ln"
# The positive control, at the last checkpoint in every seed of the baseline arm.
CONTROL_MASSIVE = 100.0  # Sun et al.'s max |h| / median |h|, largest over the block outputs
CONTROL_SINK = 0.3       # the sink rate (share of heads and sequences with α_0 > 0.3), mean
SENSITIVITY_MASSIVE = (30.0, 300.0)  # the control's threshold, recomputed at these
CONFIDENCE = 0.95

# The accounts (row name, claim, source), as the report prints them.
ACCOUNT_CLAIMS = {
    "godey": ("Godey et al.", "anisotropy comes from self-attention's sharpening (the key term), "
              "whatever the optimiser", "Godey, de la Clergerie & Sagot 2024"),
    "machina_mercer": ("Machina & Mercer", "the final norm's per-channel gain γ makes the "
                       "geometry", "Machina & Mercer 2024"),
    "elhage_osp": ("Elhage et al.; OSP", "Adam's per-dimension normalisers make privileged bases, "
                   "outlier features and massive activations", "Elhage et al. 2023; Park et al. "
                   "2025"),
    "spike_sparse_sink": ("Spike, Sparse, Sink", "sinks and massive activations co-occur because "
                          "of pre-norm; without it they decouple", "The Spike, the Sparse and the "
                          "Sink, 2026"),
    "guo_sgd": ("Guo et al.", "on Bigram-Backcopy, SGD instead of Adam removes the extreme tokens",
                "Guo et al., active-dormant heads"),
}
CRITERIA = {
    "control": (
        f"positive control: in the {BASELINE} arm (AdamW, per-channel γ, pre-LN, softmax) every "
        f"seed's last checkpoint has massive_top_ratio ≥ {CONTROL_MASSIVE:g} and sink_rate ≥ "
        f"{CONTROL_SINK:g}; a dataset where it fails makes no claim (not testable at this scale)"),
    "godey": (
        f"for every optimiser arm {OPTIMIZER_ARMS}: the 95% t-interval over seeds of the rise "
        f"from step 0 to the last checkpoint of both the cross-sequence cosine and |cos(q̄, k̄)| "
        f"is above 0; holds if for every optimiser on every dataset where the control is "
        f"reached, does not hold if for none, partly otherwise"),
    "machina_mercer": (
        f"the per-channel γ makes the geometry: the {BASELINE} arm's last-checkpoint "
        f"cross-sequence cosine exceeds each of {GAIN_ARMS}'s (95% Welch interval of the "
        f"difference above 0); holds if both on every dataset where the control is reached, does "
        f"not hold if none, partly otherwise"),
    "elhage_osp": (
        f"Adam's per-dimension normalisers make the outliers: the {BASELINE} arm's "
        f"last-checkpoint kurtosis and log massive_top_ratio exceed each of {ROTATION_ARMS}'s "
        f"(95% Welch interval above 0); holds if all four comparisons hold on every dataset where "
        f"the control is reached, does not hold if none, partly otherwise (sgd and the OSP arm, "
        f"Muon with one γ, are shown)"),
    "spike_sparse_sink": (
        f"pre-norm couples sinks and massive activations: per seed, the Spearman correlation over "
        f"the checkpoints after step 0 of sink_rate with log massive_top_ratio; holds if its "
        f"95% t-interval over seeds is above 0 in the {BASELINE} (pre-LN) arm and, in the "
        f"{POST_LN} arm, contains 0 or lies below the pre-LN interval; does not hold if the "
        f"pre-LN interval is not above 0; partly otherwise"),
    "guo_sgd": (
        f"Guo et al. on bigram_backcopy: SGD removes the extreme tokens; reproduces (holds) if "
        f"every sgd seed's last massive_top_ratio is below {CONTROL_MASSIVE:g} and the 95% Welch "
        f"interval of {BASELINE} − sgd sink_rate is above 0; does not hold if neither; partly "
        f"otherwise"),
}


def final(runs: Sequence[Mapping[str, Any]], metric: str, log: bool = False) -> np.ndarray:
    """(R,) the last checkpoint's value of `metric` in each run (log: its natural log)."""
    values = np.array([r["series"][metric][-1] for r in runs], np.float64)
    return np.log(values) if log else values


def rise(runs: Sequence[Mapping[str, Any]], metric: str) -> np.ndarray:
    """(R,) last checkpoint minus step 0, per run."""
    return np.array([r["series"][metric][-1] - r["series"][metric][0] for r in runs], np.float64)


def welch_interval(a: Any, b: Any, confidence: float = CONFIDENCE) -> dict[str, float]:
    """mean(a) − mean(b) with its Welch–Satterthwaite t-interval (a and b independent samples,
    each ≥ 2 finite values); NaN bounds when either has fewer or both have no spread."""
    from scipy import stats  # host-side only

    a, b = (np.asarray(x, np.float64) for x in (a, b))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "low": math.nan, "high": math.nan}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    if va + vb == 0:
        return {"diff": diff, "low": diff, "high": diff}
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, dof) * math.sqrt(va + vb))
    return {"diff": diff, "low": diff - half, "high": diff + half}


def t_interval(values: Any) -> dict[str, float]:
    """Mean and 95% t-interval over the finite values (NaN bounds under 2 of them)."""
    x = np.asarray(values, np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return {"mean": float(x.mean()) if len(x) else math.nan, "low": math.nan,
                "high": math.nan}
    return {k: float(v) for k, v in _t_interval(x).items() if k != "n"}


def _above(interval: Mapping[str, float]) -> bool:
    return bool(np.isfinite(interval["low"]) and interval["low"] > 0)


def _text(interval: Mapping[str, float]) -> str:
    mean = interval.get("diff", interval.get("mean"))
    return f"{g(mean)} [{g(interval['low'])}, {g(interval['high'])}]"


def control_reached(runs: Sequence[Mapping[str, Any]], massive: float = CONTROL_MASSIVE
                    ) -> tuple[bool, str]:
    """Whether every seed of the baseline arm shows massive activations and sinks, and the
    numbers."""
    ratio, sink = final(runs, "massive_top_ratio"), final(runs, "sink_rate")
    ok = bool(len(runs) and np.all(ratio >= massive) and np.all(sink >= CONTROL_SINK))
    return ok, (f"max/median {g(ratio.min())}–{g(ratio.max())}, sink rate "
                f"{g(sink.min())}–{g(sink.max())} over {len(runs)} seeds")


def _grade(oks: Sequence[bool]) -> str:
    return HOLDS if oks and all(oks) else FAILS if not any(oks) else PARTLY


def _decide(key: str, arms: Mapping[str, Mapping[str, Sequence]] | None, needed: Sequence[str],
            per_dataset, datasets: Sequence[str] | None = None,
            massive: float = CONTROL_MASSIVE) -> Verdict:
    """The shared frame: skip datasets lacking an arm, gate on the control, grade the oks that
    `per_dataset(by_arm) → (oks, numbers)` returns over the datasets that pass."""
    if not arms:
        return Verdict(key, CRITERIA[key], NOT_MEASURED, ("the outliers grid was not run",))
    oks, numbers, tested = [], [], 0
    for dataset, by_arm in arms.items():
        if datasets is not None and dataset not in datasets:
            continue
        missing = [a for a in (BASELINE, *needed) if a not in by_arm]
        if missing:
            numbers.append(f"{dataset}: not run ({', '.join(missing)} missing)")
            continue
        reached, why = control_reached(by_arm[BASELINE], massive)
        if not reached:
            numbers.append(f"{dataset}: control not reached ({why})")
            continue
        tested += 1
        ok, shown = per_dataset(by_arm)
        oks += ok
        numbers += [f"{dataset}: {s}" for s in shown]
    if not tested:
        status = NOT_TESTABLE if any("control not reached" in n for n in numbers) else NOT_MEASURED
        return Verdict(key, CRITERIA[key], status, tuple(numbers))
    return Verdict(key, CRITERIA[key], _grade(oks), tuple(numbers))


def godey(arms, massive: float = CONTROL_MASSIVE) -> Verdict:
    def rule(by_arm):
        oks, shown = [], []
        for arm in OPTIMIZER_ARMS:
            cos = t_interval(rise(by_arm[arm], "cross_sequence_cosine"))
            qk = t_interval(rise(by_arm[arm], "abs_cos_qk"))
            oks.append(_above(cos) and _above(qk))
            shown.append(f"{arm}: Δ cross-seq cos {_text(cos)}, Δ|cos(q̄,k̄)| {_text(qk)}")
        return oks, shown
    return _decide("godey", arms, OPTIMIZER_ARMS[1:], rule, massive=massive)


def machina_mercer(arms, massive: float = CONTROL_MASSIVE) -> Verdict:
    def rule(by_arm):
        base = final(by_arm[BASELINE], "cross_sequence_cosine")
        diffs = {arm: welch_interval(base, final(by_arm[arm], "cross_sequence_cosine"))
                 for arm in GAIN_ARMS}
        return ([_above(d) for d in diffs.values()],
                [f"per-channel − {arm} cross-seq cos {_text(d)}" for arm, d in diffs.items()])
    return _decide("machina_mercer", arms, GAIN_ARMS, rule, massive=massive)


def elhage_osp(arms, massive: float = CONTROL_MASSIVE) -> Verdict:
    def rule(by_arm):
        oks, shown = [], []
        for arm in ROTATION_ARMS:
            for metric, log in (("kurtosis", False), ("massive_top_ratio", True)):
                d = welch_interval(final(by_arm[BASELINE], metric, log),
                                   final(by_arm[arm], metric, log))
                oks.append(_above(d))
                shown.append(f"adamw − {arm} {'log ' if log else ''}{metric} {_text(d)}")
        for arm in ("sgd", "osp"):
            if arm in by_arm:
                kurtosis = t_interval(final(by_arm[arm], "kurtosis"))
                ratio = t_interval(final(by_arm[arm], "massive_top_ratio"))
                shown.append(f"{arm}: kurtosis {_text(kurtosis)}, max/median {_text(ratio)}")
        return oks, shown
    return _decide("elhage_osp", arms, ROTATION_ARMS, rule, massive=massive)


def coupling(runs: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """(R,) per run, Spearman's ρ over the checkpoints after step 0 of sink_rate with log
    massive_top_ratio (NaN where either is constant)."""
    out = []
    for r in runs:
        steps = np.asarray(r["steps"])
        keep = steps > 0
        sink = np.asarray(r["series"]["sink_rate"], np.float64)[keep]
        ratio = np.log(np.asarray(r["series"]["massive_top_ratio"], np.float64)[keep])
        constant = np.ptp(sink) == 0 or np.ptp(ratio) == 0
        out.append(math.nan if constant else spearman(sink, ratio)["rho"])
    return np.asarray(out, np.float64)


def spike_sparse_sink(arms, massive: float = CONTROL_MASSIVE) -> Verdict:
    def rule(by_arm):
        pre, post = (t_interval(coupling(by_arm[arm])) for arm in (BASELINE, POST_LN))
        if not _above(pre):
            return [False], [f"pre-LN ρ {_text(pre)} not above 0; post-LN ρ {_text(post)}"]
        decoupled = not _above(post) or post["high"] < pre["low"]
        return [True, decoupled], [f"pre-LN ρ {_text(pre)}, post-LN ρ {_text(post)}"]
    return _decide("spike_sparse_sink", arms, (POST_LN,), rule, massive=massive)


def guo_sgd(arms, massive: float = CONTROL_MASSIVE) -> Verdict:
    def rule(by_arm):
        ratio = final(by_arm["sgd"], "massive_top_ratio")
        sink = welch_interval(final(by_arm[BASELINE], "sink_rate"),
                              final(by_arm["sgd"], "sink_rate"))
        return ([bool(np.all(ratio < CONTROL_MASSIVE)), _above(sink)],
                [f"sgd max/median {g(ratio.min())}–{g(ratio.max())}, adamw − sgd sink rate "
                 f"{_text(sink)}"])
    return _decide("guo_sgd", arms, ("sgd",), rule, datasets=("bigram_backcopy",),
                   massive=massive)


ACCOUNTS = {"godey": godey, "machina_mercer": machina_mercer, "elhage_osp": elhage_osp,
            "spike_sparse_sink": spike_sparse_sink, "guo_sgd": guo_sgd}


def all_verdicts(arms) -> dict[str, dict[str, Any]]:
    """{account: {"verdict", "numbers", "criterion", "sensitivity": {threshold: verdict}}}: each
    account at the control's threshold and at SENSITIVITY_MASSIVE."""
    out = {}
    for key, rule in ACCOUNTS.items():
        v = rule(arms)
        out[key] = {"verdict": v.verdict, "numbers": list(v.numbers), "criterion": v.criterion,
                    "sensitivity": {f"control max/median ≥ {m:g}": rule(arms, m).verdict
                                    for m in SENSITIVITY_MASSIVE}}
    return out


def read_arms(workdirs: Mapping[str, Any], normalization: str = "softmax"
              ) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """`arms` from normalisation-grid workdirs, one per arm ({arm: workdir}): every
    `<dataset>/<normalization>/seed_*/grid_run.json` there, by dataset and arm, by seed."""
    import json
    import pathlib

    arms: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for arm, workdir in workdirs.items():
        for dataset in sorted(p.name for p in pathlib.Path(workdir).iterdir() if p.is_dir()):
            files = sorted(pathlib.Path(workdir, dataset, normalization).glob("seed_*/grid_run.json"),
                           key=lambda f: int(f.parent.name.split("_")[1]))
            if files:
                arms.setdefault(dataset, {})[arm] = [json.loads(f.read_text()) for f in files]
    return arms
