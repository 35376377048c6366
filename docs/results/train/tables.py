"""Prints the tables of docs/TRAIN.md ("Seeded runs") from the committed results.json files:

  .venv/bin/python docs/results/train/tables.py

For each configuration (clm_small, mlm_small): every summarised quantity at the first and last
checkpoint and its change, mean [95% t-interval over the 3 seeds] with the t-test p over seeds
(`studies.train.seeds.format_table`); then, per checkpoint, the Spearman ρ across the 16 heads
of entropy with the key-dependent term and with the softmax-invariant |q̄·k̄|, as mean [interval]
over seeds, and the number of seeds whose ρ has p < 0.05 over heads.
"""
import json
import pathlib

import numpy as np

from anisotropy_jax.studies.train import seeds

HERE = pathlib.Path(__file__).resolve().parent
TERMS = ("key_term_std", "mean_query_key_dot_softmax_invariant")


def per_step_rho(name: str, summary: dict) -> list[str]:
    per_seed = [json.loads((HERE / name / f"seed_{s}" / "results.json").read_text())
                for s in summary["seeds"]]
    lines = ["| step | " + " | ".join(f"ρ(entropy, {t}) [seeds with p < 0.05]" for t in TERMS)
             + " |", "| --- | --- | --- |"]
    for i, step in enumerate(summary["steps"]):
        cells = []
        for term in TERMS:
            q = summary["quantities"][f"spearman_across_heads/{term}"]
            significant = sum(float(r["correlation"][term]["p"][i]) < 0.05 for r in per_seed)
            mean, low, high = (float(np.ravel(q[k])[i]) for k in ("mean", "low", "high"))
            cells.append(f"{mean:+.2f} [{low:+.2f}, {high:+.2f}] [{significant}/{len(per_seed)}]")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    for name in ("clm_small", "mlm_small"):
        path = HERE / name / "results.json"
        if not path.exists():
            print(f"{path}: missing")
            continue
        summary = json.loads(path.read_text())
        print(f"## {name}: {summary['command']}\n")
        print(seeds.format_table(summary) + "\n")
        print("\n".join(per_step_rho(name, summary)) + "\n")


if __name__ == "__main__":
    main()
