"""The accounts' verdicts on the reduced outliers grid, from the device calls' archives.

    .venv/bin/python docs/results/normalizations/outliers_h100/verdicts.py

Unpacks call*/outliers_<arm>.tgz into a temporary folder, applies the rules fixed before the runs
(anisotropy_jax/studies/report/verdicts_outliers.py) to the 3,000-step arms, and writes
verdicts.json and table.md beside this file (the 12,000-step AdamW run is the control's probe),
and the metric × step figures `<metric>_by_step.png` (one panel per arm, every seed in grey,
their mean in blue).
"""
import json
import pathlib
import tarfile
import tempfile

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.plotting import outliers
from anisotropy_jax.studies.report import verdicts_outliers as V

HERE = pathlib.Path(__file__).resolve().parent
ARMS = ("adamw", "sgd", "muon", "adamw_rotated", "single_gain", "no_gain", "post_ln")
SHOWN = ("val_loss", "cross_sequence_cosine", "abs_cos_qk", "sink_rate", "massive_top_ratio",
         "kurtosis")

# (metric, y label, log y, threshold line) of the metric × step figures
FIGURES = (("massive_top_ratio", "max |h| / median |h|", True, V.CONTROL_MASSIVE),
           ("sink_rate", "sink rate", False, None),
           ("cross_sequence_cosine", "cross-sequence cosine", False, None),
           ("abs_cos_qk", "|cos(mean q, mean k)|", False, None),
           ("val_loss", "validation loss (nats/token)", False, None))


def write_figures(by_arm):
    for metric, label, log_y, threshold in FIGURES:
        results.save_figure(outliers.metric_by_step(by_arm, metric, label=label, log_y=log_y,
                                                    threshold=threshold),
                            HERE / f"{metric}_by_step.png")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for archive in sorted(HERE.glob("call*/outliers_*.tgz")):
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        arms = V.read_arms({arm: pathlib.Path(tmp, arm) for arm in ARMS})
        probe = V.read_arms({"adamw_12k": pathlib.Path(tmp, "adamw_12k")})
    verdicts = V.all_verdicts(arms)
    write_figures(arms["bigram_backcopy"])
    rows = ["| arm | steps | seeds | " + " | ".join(SHOWN) + " |",
            "| --- | --- | --- |" + " --- |" * len(SHOWN)]
    for dataset, by_arm in {**arms, **{d: a for d, a in probe.items()}}.items():
        for arm, runs in (by_arm if dataset not in probe else {**arms[dataset],
                                                               **probe[dataset]}).items():
            cells = []
            for metric in SHOWN:
                t = V.t_interval(V.final(runs, metric))
                cells.append(f"{V.g(t['mean'])} [{V.g(t['low'])}, {V.g(t['high'])}]")
            rows.append(f"| {arm} | {runs[0]['steps'][-1]} | {len(runs)} | "
                        + " | ".join(cells) + " |")
        break  # one dataset (bigram_backcopy) in this grid
    control = {m: V.control_reached(probe["bigram_backcopy"]["adamw_12k"], m)[1]
               for m in (30.0, 100.0)}
    doc = {"verdicts": verdicts, "control_probe_12000_steps": control,
           "arms": {d: {a: len(r) for a, r in by.items()} for d, by in arms.items()},
           "largest_max_median_ratio_any_run_any_checkpoint": float(max(
               np.max(r["series"]["massive_top_ratio"]) for by in (arms, probe)
               for runs in by["bigram_backcopy"].values() for r in runs))}
    (HERE / "verdicts.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    lines = ["| account | verdict | numbers | sensitivity |", "| --- | --- | --- | --- |"]
    for key, v in verdicts.items():
        sens = "; ".join(f"{k}: {x}" for k, x in v["sensitivity"].items())
        lines.append(f"| {V.ACCOUNT_CLAIMS[key][0]} | {v['verdict']} | "
                     f"{'; '.join(v['numbers'])} | {sens} |")
    (HERE / "table.md").write_text("\n".join(rows) + "\n\n" + "\n".join(lines) + "\n")
    print((HERE / "table.md").read_text())
    print(json.dumps(doc["control_probe_12000_steps"], ensure_ascii=False),
          doc["largest_max_median_ratio_any_run_any_checkpoint"])


if __name__ == "__main__":
    main()
