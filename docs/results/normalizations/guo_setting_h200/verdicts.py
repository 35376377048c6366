"""The positive control in Guo et al.'s own setting, from the committed archive.

    .venv/bin/python docs/results/normalizations/guo_setting_h200/verdicts.py

How the archive was made: one device call (`call.sh`, ARMS="adamw sgd" LIMIT=320, one NVIDIA
H200) trained the AdamW arm's 5 seeds for 1,500 steps and analysed seed 0 at every log-spaced
checkpoint before its time ran out (`call1/`: its log and summary; the SGD arm did not start).
The last checkpoint (step 1,500) of every seed came back, and the same command, run on the 2-core
CPU into that workdir, analysed it for seeds 1-4 (seed 0's series is the GPU's). So seeds 1-4
have one analysed checkpoint, the last, which is the one the control's rule reads.
`guo_adamw_analysed.tgz` is that workdir without checkpoints. A second call (ARMS=sgd LIMIT=390,
one H200, `call2/`) trained and analysed the SGD arm (momentum 0.9, lr 0.03, otherwise the same)
for the same 1,500 steps: `guo_sgd.tgz`. This script applies the rules fixed before the runs
(anisotropy_jax/studies/report/verdicts_outliers.py: `control_reached` and `guo_sgd`, at the
control's threshold and its sensitivity thresholds), prints both arms' last checkpoints side by
side with the AdamW − SGD Welch intervals (descriptive: the control gates any claim), and writes
verdicts.json and massive_by_step.png (max/median against the step, one panel per arm; AdamW's
seeds 1-4 have their last checkpoint only) beside it.
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
SHOWN = ("val_loss", "cross_sequence_cosine", "abs_cos_qk", "sink_rate", "massive_top_ratio",
         "kurtosis")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for archive in ("guo_adamw_analysed.tgz", "guo_sgd.tgz"):
            with tarfile.open(HERE / archive) as tar:
                tar.extractall(tmp, filter="data")
        arms = V.read_arms({arm: pathlib.Path(tmp, arm) for arm in ("adamw", "sgd")})
    runs = arms["bigram_backcopy"]
    control = {f"{m:g}": V.control_reached(runs["adamw"], m)
               for m in (V.CONTROL_MASSIVE, *V.SENSITIVITY_MASSIVE)}
    final = {arm: {metric: {"per_seed": V.final(r, metric).tolist(), **V.t_interval(
        V.final(r, metric))} for metric in SHOWN} for arm, r in runs.items()}
    difference = {metric: V.welch_interval(V.final(runs["adamw"], metric),
                                           V.final(runs["sgd"], metric)) for metric in SHOWN}
    guo = V.guo_sgd(arms)
    results.save_figure(outliers.metric_by_step(runs, "massive_top_ratio", log_y=True,
                                                label="max |h| / median |h|",
                                                threshold=V.CONTROL_MASSIVE),
                        HERE / "massive_by_step.png")
    doc = {"steps": runs["adamw"][0]["steps"][-1], "seeds": len(runs["adamw"]),
           "control_criterion": V.CRITERIA["control"],
           "control_reached": {k: {"reached": ok, "numbers": text}
                               for k, (ok, text) in control.items()},
           "guo_sgd": {"criterion": guo.criterion, "verdict": guo.verdict,
                       "numbers": list(guo.numbers)},
           "last_checkpoint": final, "adamw_minus_sgd": difference,
           "largest_max_median_ratio_any_analysed_checkpoint": {arm: float(max(
               np.max(x["series"]["massive_top_ratio"]) for x in r)) for arm, r in runs.items()}}
    (HERE / "verdicts.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(doc["control_reached"], ensure_ascii=False, indent=1))
    print("guo_sgd:", guo.verdict, "|", "; ".join(guo.numbers))
    for metric in SHOWN:
        cells = [f"{arm} {V.g(final[arm][metric]['mean'])} [{V.g(final[arm][metric]['low'])}, "
                 f"{V.g(final[arm][metric]['high'])}]" for arm in runs]
        print(f"{metric}: " + "; ".join(cells) + f"; adamw − sgd {V._text(difference[metric])}")


if __name__ == "__main__":
    main()
