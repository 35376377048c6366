"""The positive control in Guo et al.'s own setting, from the committed archive.

    .venv/bin/python docs/results/normalizations/guo_setting_h200/verdicts.py

How the archive was made: one device call (`call.sh`, ARMS="adamw sgd" LIMIT=320, one NVIDIA
H200) trained the AdamW arm's 5 seeds for 1,500 steps and analysed seed 0 at every log-spaced
checkpoint before its time ran out (`call1/`: its log and summary; the SGD arm did not start).
The last checkpoint (step 1,500) of every seed came back, and the same command, run on the 2-core
CPU into that workdir, analysed it for seeds 1-4 (seed 0's series is the GPU's). So seeds 1-4
have one analysed checkpoint, the last, which is the one the control's rule reads.
`guo_adamw_analysed.tgz` is that workdir without checkpoints. This script applies the rule fixed
before the run (anisotropy_jax/studies/report/verdicts_outliers.py: `control_reached`, at the
control's threshold and its sensitivity thresholds) and writes verdicts.json beside it.
"""
import json
import pathlib
import tarfile
import tempfile

import numpy as np

from anisotropy_jax.studies.report import verdicts_outliers as V

HERE = pathlib.Path(__file__).resolve().parent
SHOWN = ("val_loss", "cross_sequence_cosine", "abs_cos_qk", "sink_rate", "massive_top_ratio",
         "kurtosis")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(HERE / "guo_adamw_analysed.tgz") as tar:
            tar.extractall(tmp, filter="data")
        runs = V.read_arms({"adamw": pathlib.Path(tmp, "adamw")})["bigram_backcopy"]["adamw"]
    control = {f"{m:g}": V.control_reached(runs, m)
               for m in (V.CONTROL_MASSIVE, *V.SENSITIVITY_MASSIVE)}
    final = {metric: {"per_seed": V.final(runs, metric).tolist(),
                      **V.t_interval(V.final(runs, metric))} for metric in SHOWN}
    doc = {"steps": runs[0]["steps"][-1], "seeds": len(runs),
           "control_criterion": V.CRITERIA["control"],
           "control_reached": {k: {"reached": ok, "numbers": text}
                               for k, (ok, text) in control.items()},
           "last_checkpoint": final,
           "largest_max_median_ratio_any_analysed_checkpoint": float(max(
               np.max(r["series"]["massive_top_ratio"]) for r in runs))}
    (HERE / "verdicts.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(doc["control_reached"], ensure_ascii=False, indent=1))
    for metric, t in final.items():
        print(f"{metric}: {V.g(t['mean'])} [{V.g(t['low'])}, {V.g(t['high'])}]")


if __name__ == "__main__":
    main()
