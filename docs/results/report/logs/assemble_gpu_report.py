"""Assembles the workdir of the GPU report (`--config=report:gpu`) from runs made on different
machines, so that `experiments/report.py --config=report:gpu --workdir=WORKDIR` loads every study
(its `study_run.json`) instead of running it:

  training     WORKDIR/training/<objective>/seed_<s>/: the seeds gpu_training.sh trained and
               analysed on one GPU (its training.tgz, unpacked here by hand); the report loads
               analysed seeds of the same config without retraining
  embeddings   adopted from docs/results/embeddings/gpu/ (embeddings.py:gpu on one H100)
  sweep, pretrained, modalities, depth
               adopted from the committed default-size report (docs/results/report/, the 2-core
               CPU): report:gpu asks for exactly their configs

A study is adopted only if the config its results recorded equals the one report:gpu asks for
(fields added to the code since, absent from the record, are listed, not compared); its
study_run.json then carries the reproduction's own stamp of the config (`runner._stamp`), the
wall time and device of the run that made it (from the committed REPORT.md's studies table).

  .venv/bin/python docs/results/report/logs/assemble_gpu_report.py WORKDIR
"""
import json
import pathlib
import re
import shutil
import sys

from anisotropy_jax import results
from anisotropy_jax.configs import report as report_configs
from anisotropy_jax.configs.report import reproduce_config_from_mapping
from anisotropy_jax.configs.sweep import upgrade_recorded
from anisotropy_jax.studies.report import runner
from anisotropy_jax.studies.report.report import load_bundle

ROOT = pathlib.Path(__file__).resolve().parents[4]
BUNDLE = ROOT / "docs" / "results" / "report"
EMBEDDINGS_GPU = ROOT / "docs" / "results" / "embeddings" / "gpu"
# The committed REPORT.md of the default-size report, whose studies table recorded their wall time
# and machine (kept here, since regenerating docs/REPORT.md replaces it).
REPORT_BEFORE = pathlib.Path(__file__).resolve().parent / "REPORT_default_size.txt"


def differences(recorded, wanted, path=""):
    """(mismatches, fields absent from the record) between two JSON trees."""
    if isinstance(wanted, dict) and isinstance(recorded, dict):
        bad, added = [], []
        for key, value in wanted.items():
            if key not in recorded:
                added.append(f"{path}{key}")
                continue
            b, a = differences(recorded[key], value, f"{path}{key}.")
            bad, added = bad + b, added + a
        return bad + [f"{path}{k} (recorded only)" for k in recorded if k not in wanted], added
    if isinstance(wanted, list) and isinstance(recorded, list) and len(wanted) == len(recorded):
        bad, added = [], []
        for i, (r, w) in enumerate(zip(recorded, wanted)):
            b, a = differences(r, w, f"{path}{i}.")
            bad, added = bad + b, added + a
        return bad, added
    return ([] if recorded == wanted else [f"{path[:-1]}: {recorded!r} recorded, {wanted!r} asked"]), []


def recorded_config(name, doc):
    if name == "embeddings":
        return doc["embeddings_config"]
    if name == "depth":
        return upgrade_recorded(doc["depth_config"])
    if name == "sweep":
        return [[label, upgrade_recorded(cfg)] for label, cfg in doc["config"].items()]
    return None  # pretrained, modalities: no config recorded in their results


def studies_table():
    """{study: (seconds, device)} from the committed REPORT.md's studies table."""
    out = {}
    for line in REPORT_BEFORE.read_text().splitlines():
        m = re.match(r"\| (\w+) \| ran \| (\d+) s \| ([^|,]+)", line)
        if m:  # the device only: the report adds the commits from the results themselves
            out[m.group(1)] = (float(m.group(2)), m.group(3).strip())
    return out


def main(workdir: pathlib.Path) -> None:
    config = reproduce_config_from_mapping(report_configs.get_config("gpu"))
    docs, _ = load_bundle(BUNDLE)
    docs["embeddings"] = json.loads((EMBEDDINGS_GPU / "results.json").read_text())
    timing = studies_table()
    timing["embeddings"] = (float(docs["embeddings"]["provenance"]["wall_seconds"]),
                            f"1 × {docs['embeddings']['provenance']['device_kind']}")
    for name in ("sweep", "pretrained", "modalities", "depth", "embeddings"):
        stamp = runner._stamp(config, name)
        recorded = recorded_config(name, docs[name])
        if recorded is not None:
            bad, added = differences(recorded, stamp)
            if bad:
                sys.exit(f"{name}: recorded config differs: {bad[:5]}")
            print(f"{name}: recorded config matches; fields added since: {sorted(set(a.split('.')[-1] for a in added))}")
        else:
            print(f"{name}: no config recorded in its results; adopted as the default-size run")
        out = workdir / name
        source = EMBEDDINGS_GPU if name == "embeddings" else BUNDLE / name
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(source, out)
        seconds, device = timing[name]
        run = {"name": name, "results": results.to_jsonable(docs[name]), "reason": "",
               "skipped": [], "seconds": seconds, "device": device}
        results.write_json(out / runner.STUDY_RUN_FILE, {"config": stamp, "run": run})


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
