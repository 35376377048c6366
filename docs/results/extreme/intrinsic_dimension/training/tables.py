"""Prints the per-layer intrinsic dimension along training of docs/results/extreme/intrinsic_dimension/
README.md ("Along training") from the committed results.json of each seed's analysis:

  .venv/bin/python docs/results/extreme/intrinsic_dimension/training/tables.py

For each estimator (TwoNN; GRIDE at (n1, n2) = (8, 16)): per checkpoint step and hidden state
(0 = embedding output, i = output of block i − 1), the mean over the seeds and their range
[min, max]; then per hidden state, for each seed, the step at which the ID peaks, the rise from
the first checkpoint to the peak and the fall from the peak to the last checkpoint (relative), and
whether it rises then falls (peak strictly between the first and the last checkpoint).
"""
import json
import math
import pathlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
RUN = "clm_small"
ESTIMATORS = {"twonn_dimension": "TwoNN", "gride_dimension": "GRIDE (8, 16)"}


def load() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((HERE / RUN).glob("seed_*/results.json"))]


def _label(state: int, num_states: int) -> str:
    return "embeddings" if state == 0 else f"block {state - 1}"


def per_step(name: str, runs: list[dict]) -> list[str]:
    steps = runs[0]["steps"]
    values = np.asarray([r["layers"][name] for r in runs], np.float64)  # (seeds, S, states)
    states = values.shape[2]
    lines = ["| step | " + " | ".join(_label(s, states) for s in range(states)) + " |",
             "| --- |" + " --- |" * states]
    for i, step in enumerate(steps):
        cells = [f"{np.mean(values[:, i, s]):.2f} [{np.min(values[:, i, s]):.2f}, "
                 f"{np.max(values[:, i, s]):.2f}]" for s in range(states)]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def peaks(name: str, runs: list[dict]) -> list[str]:
    steps = runs[0]["steps"]
    values = np.asarray([r["layers"][name] for r in runs], np.float64)
    lines = ["| state | seed | first | peak (step) | last | rise to peak | fall after peak | "
             "rises then falls |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in range(values.shape[2]):
        for k, run in enumerate(runs):
            v = values[k, :, s]
            if not np.all(np.isfinite(v)):
                lines.append(f"| {_label(s, values.shape[2])} | {run['config']['train']['seed']} "
                             "| undefined at some step | | | | | |")
                continue
            top = int(np.argmax(v))
            inside = 0 < top < len(v) - 1
            lines.append(
                f"| {_label(s, values.shape[2])} | {run['config']['train']['seed']} | {v[0]:.2f} "
                f"| {v[top]:.2f} ({steps[top]}) | {v[-1]:.2f} | {v[top] / v[0] - 1:+.0%} | "
                f"{v[-1] / v[top] - 1:+.0%} | {'yes' if inside else 'no'} |")
    return lines


def main() -> None:
    runs = load()
    seeds = [r["config"]["train"]["seed"] for r in runs]
    loss = [r["training"]["final_loss"] for r in runs]
    print(f"{RUN}: seeds {seeds}, final training loss "
          + ", ".join(f"{v:.3f}" for v in loss if v is not None and math.isfinite(v)))
    for name, title in ESTIMATORS.items():
        print(f"\n{title}, mean [min, max] over {len(runs)} seeds\n")
        print("\n".join(per_step(name, runs)))
        print(f"\n{title}: peak per seed\n")
        print("\n".join(peaks(name, runs)))


if __name__ == "__main__":
    main()
