"""The Shakespeare control probe (AdamW / per-channel γ / pre-LN, the `full` variant's 6-layer
d = 384 model, 3,000 steps): per analysed seed, the last checkpoint's control metrics and the
max/median along training, from outliers_adamw_shakespeare.tgz.

    .venv/bin/python docs/results/normalizations/outliers_h100/call5/summarise.py
"""
import json
import pathlib
import tarfile

HERE = pathlib.Path(__file__).resolve().parent
with tarfile.open(HERE / "outliers_adamw_shakespeare.tgz") as tar:
    names = sorted(n for n in tar.getnames() if n.endswith("grid_run.json"))
    for name in names:
        run = json.load(tar.extractfile(name))
        s = run["series"]
        print(f"seed {run['seed']}: step {run['steps'][-1]}, max/median {s['massive_top_ratio'][-1]:.1f}, "
              f"sink rate {s['sink_rate'][-1]:.3f}, kurtosis {s['kurtosis'][-1]:.2f}, "
              f"cross-sequence cosine {s['cross_sequence_cosine'][-1]:.3f}; max/median by step "
              + ", ".join(f"{t}: {v:.1f}" for t, v in zip(run["steps"], s["massive_top_ratio"])))
    print(f"{len(names)} of 5 seeds analysed (the call's time ran out in the analysis)")
