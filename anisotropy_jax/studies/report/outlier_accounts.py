"""The accounts of the outliers, one row each, computed from the committed raw results by the
rules fixed before the runs (`verdicts_outliers`, `verdicts_compression`): the verdict (or "regime
not reached, no claim" where the positive control fails), the numbers with their intervals over
seeds, the loss match of the arms each rule compares and the sensitivity entry.

`arms_from_folder(folder)` reads the device calls' archives (`**/*.tgz`, each one arm's workdir
without checkpoints, the arm named by its top folder); `table(folder)` is the doc table
(`anisotropy_jax.doc_tables`, kind `outlier_accounts`). Li et al.'s row reads the baseline arm's
runs as the byte models and, where the folder holds one, FOLDER/embeddings/results.json as the
BPE control (`compression.bpe_runs`; without it the row reads "not measured").
"""
from __future__ import annotations

import pathlib
import tarfile
import tempfile
from typing import Any, Mapping

from anisotropy_jax.studies.report import (compression, verdicts_compression as C,
                                           verdicts_outliers as V)
from anisotropy_jax.studies.report.verdict import NOT_MEASURED, NOT_TESTABLE

NO_CLAIM = "regime not reached, no claim"
# The arms each account's rule compares with the baseline (their loss is matched against it).
COMPARED = {"godey": V.OPTIMIZER_ARMS[1:], "machina_mercer": V.GAIN_ARMS,
            "elhage_osp": V.ROTATION_ARMS, "spike_sparse_sink": (V.POST_LN,), "guo_sgd": ("sgd",)}


def arms_from_folder(folder: str | pathlib.Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """`arms` ({dataset: {arm: [run per seed]}}) of every archive under `folder`."""
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for archive in sorted(pathlib.Path(folder).glob("**/*.tgz")):
            with tarfile.open(archive) as tar:
                tops = {m.name.split("/")[0] for m in tar.getmembers()}
                tar.extractall(tmp, filter="data")
            names += sorted(tops)
        return V.read_arms({name: pathlib.Path(tmp, name) for name in dict.fromkeys(names)})


def loss_match(arms: Mapping[str, Mapping[str, list]], key: str) -> str:
    """The last-checkpoint validation loss of the baseline minus each compared arm (Welch)."""
    parts = []
    for dataset, by_arm in arms.items():
        if V.BASELINE not in by_arm:
            continue
        base = V.final(by_arm[V.BASELINE], "val_loss")
        for arm in COMPARED[key]:
            if arm in by_arm:
                d = V.welch_interval(base, V.final(by_arm[arm], "val_loss"))
                parts.append(f"{dataset}: {V.BASELINE} − {arm} {V._text(d)}")
        if not parts:
            t = V.t_interval(base)
            parts.append(f"{dataset}: {V.BASELINE} alone, {V._text(t)}")
    return "; ".join(parts) or "–"


def _control(arms) -> str:
    """The positive control's numbers with their t-intervals, per dataset."""
    out = []
    for dataset, by_arm in arms.items():
        if V.BASELINE in by_arm:
            runs = by_arm[V.BASELINE]
            ratio, sink = (V.t_interval(V.final(runs, m)) for m in ("massive_top_ratio",
                                                                      "sink_rate"))
            out.append(f"{dataset}: control ({V.BASELINE}, {len(runs)} seeds, step "
                       f"{runs[0]['steps'][-1]}) max/median {V._text(ratio)}, sink rate "
                       f"{V._text(sink)}")
    return "; ".join(out)


def _sensitivity(verdict: str, entries: Mapping[str, str]) -> str:
    flips = [f"{choice} (→ {v})" for choice, v in entries.items() if v != verdict]
    return "robust (" + ", ".join(entries) + ")" if not flips else "flips under " + "; ".join(flips)


def rows(arms, bpe_runs=None) -> list[dict[str, str]]:
    """One row per account: name, verdict, numbers, loss match, sensitivity (`bpe_runs`: Li et
    al.'s BPE control, `compression.bpe_runs`)."""
    out = []
    for key, entry in V.all_verdicts(arms).items():
        verdict = NO_CLAIM if entry["verdict"] == NOT_TESTABLE else entry["verdict"]
        numbers = "; ".join(entry["numbers"])
        if entry["verdict"] == NOT_TESTABLE:
            numbers = _control(arms)
        elif entry["verdict"] == NOT_MEASURED and _control(arms):
            numbers += "; " + _control(arms)
        sensitivity = ("–" if entry["verdict"] == NOT_MEASURED
                       else _sensitivity(entry["verdict"], entry["sensitivity"]))
        out.append({"account": V.ACCOUNT_CLAIMS[key][0], "verdict": verdict, "numbers": numbers,
                    "loss": loss_match(arms, key), "sensitivity": sensitivity})
    byte = [r for by_arm in arms.values() for r in by_arm.get(V.BASELINE, [])]
    li = C.compression_phase(byte, bpe_runs)
    sens = "–" if li.verdict == NOT_MEASURED else _sensitivity(li.verdict,
                                                              C.sensitivity(byte, bpe_runs))
    out.append({"account": "Li et al. (compression phase)", "verdict": li.verdict,
                "numbers": "; ".join(li.numbers), "loss": "–", "sensitivity": sens})
    return out


def table(folder: str | pathlib.Path) -> str:
    """The markdown table of `rows` from the archives under `folder`."""
    lines = ["| account | verdict | numbers (95% t-intervals over seeds) | loss match (last "
             "val loss, Welch) | sensitivity |", "| --- | --- | --- | --- | --- |"]
    bpe = compression.bpe_runs(pathlib.Path(folder) / "embeddings")
    for row in rows(arms_from_folder(folder), bpe):
        lines.append(f"| {row['account']} | **{row['verdict']}** | {row['numbers']} | "
                     f"{row['loss']} | {row['sensitivity']} |")
    return "\n".join(lines) + "\n"
