"""The reproduction report: each verdict function on synthetic results (both outcomes and the
not-measured case), the config's validation, and experiments/report.py `:smoke` end to end
(REPORT.md's structure: every claim row, every verdict one of three, every linked file exists)."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from anisotropy_jax import configs
from anisotropy_jax.config import ConfigError
from anisotropy_jax.configs.report import reproduce_config_from_mapping
from anisotropy_jax.studies.report import verdicts as V

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_all_verdicts_cover_every_claim():
    out = V.all_verdicts({}, {"sweep": "not run"})
    assert [v.key for v in out] == list(V.CLAIMS)
    assert {v.verdict for v in out} == {V.NOT_MEASURED}


def _config(variant):
    return configs.module("report").get_config(variant)


def test_config_variants_validate_and_errors_name_the_field():
    kinds = ("biased", "norm_matched", "fixed_norm", "per_sequence")
    for variant, want in (("smoke", kinds), ("full", kinds * 2), (None, kinds * 2),
                          ("gpu", kinds * 2)):
        cfg = reproduce_config_from_mapping(_config(variant))
        assert tuple(c.inputs for _, c in cfg.sweeps) == want
        assert cfg.size == (variant or "default")
    gpu = reproduce_config_from_mapping(_config("gpu"))  # the training at the size it is about
    assert [(t.objective, t.model.d_model, t.model.num_layers, t.steps, t.data.seq_len)
            for t, _ in gpu.training] == [("clm", 384, 6, 4000, 256), ("mlm", 384, 6, 4000, 256)]
    assert len(gpu.seeds) >= 5 and gpu.sweeps == reproduce_config_from_mapping(_config(None)).sweeps
    with pytest.raises(ValueError, match="unknown variant"):
        _config("nope")
    bad = _config("smoke").to_dict()
    bad["seeds"] = (1,)
    with pytest.raises(ConfigError, match="^seeds: "):
        reproduce_config_from_mapping(bad)
    bad = _config("smoke").to_dict()
    bad["sweep"]["compare_values"] = ("biased",)
    with pytest.raises(ConfigError, match="^sweep.compare_values: "):
        reproduce_config_from_mapping(bad)
    bad = _config("smoke").to_dict()
    bad["depth"]["num_layers"] = 0
    with pytest.raises(ConfigError, match="^depth.num_layers: "):
        reproduce_config_from_mapping(bad)


def test_smoke_script_writes_a_complete_report(tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "report.py"),
         "--config=" + str(ROOT / "anisotropy_jax" / "configs" / "report.py") + ":smoke",
         f"--workdir={tmp_path / 'w'}", f"--report={tmp_path / 'docs' / 'REPORT.md'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for report in (tmp_path / "w" / "REPORT.md", tmp_path / "docs" / "REPORT.md"):
        text = report.read_text()
        table = text.split("## Claims\n")[1].split("\n## ")[0]
        rows = [r for r in table.splitlines() if r.startswith("| ") and "---" not in r][1:]
        assert len(rows) == len(V.CLAIMS)
        for (name, claim, origin), row in zip(V.CLAIMS.values(), rows):
            assert row.startswith(f"| {name}: {claim} | {origin} | **")
            assert re.search(r"\| \*\*(.+?)\*\* \|", row).group(1) in V.VERDICTS
        assert "**Smoke size.**" in text  # a smoke report says its verdicts test the code
        links = re.findall(r"\]\(([^)]+)\)", text)
        assert any(link.endswith(".png") for link in links)
        for link in links:
            assert (report.parent / link).is_file(), link
    text = (tmp_path / "w" / "REPORT.md").read_text()
    assert "| modalities | not measured: not in this config's studies |" in text
    # A rerun into the same workdir loads every finished study instead of recomputing it and
    # writes the same claims; one whose settings changed is refused, naming the folder. The
    # training study is rerun without its checkpoints (as when its seeds were trained on another
    # machine): the analysed seeds are loaded, not retrained.
    (tmp_path / "w" / "training" / "study_run.json").unlink()
    for checkpoints in (tmp_path / "w" / "training").glob("*/seed_*/checkpoints"):
        shutil.rmtree(checkpoints)
    again = subprocess.run(proc.args, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    for study in ("sweep", "pretrained", "depth"):
        assert f"== {study}: loaded from" in again.stdout
    assert "clm: 2 seeds loaded from" in again.stdout and "trained clm" not in again.stdout
    claims = (tmp_path / "w" / "REPORT.md").read_text().split("## Claims\n")[1].split("\n## ")[0]
    assert claims == text.split("## Claims\n")[1].split("\n## ")[0]
    changed = subprocess.run(proc.args + ["--config.seeds=(0, 2)"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert changed.returncode == 2
    assert "error: workdir: " in changed.stderr and "training study of another config" in (
        changed.stderr)
    for key in ("godey_3a", "godey_3b", "godey_4b", "depth_a"):  # measured by every smoke run
        name, claim, origin = V.CLAIMS[key]
        assert f"{name}: {claim} | {origin} | **not measured**" not in text, key


def test_regenerating_a_bundled_report_keeps_the_hand_written_sections(tmp_path):
    from anisotropy_jax.studies.report import report
    workdir, path = tmp_path / "run", tmp_path / "docs" / "REPORT.md"
    workdir.mkdir()
    path.parent.mkdir()
    path.write_text(f"# old report\n\nold claims\n\n{report.KEPT_MARKER}\n\n## By hand\n\nkept\n")
    report.bundle("# new report\n\nnew claims\n", workdir, path, {})
    text = path.read_text()
    assert text.startswith("# new report") and "old claims" not in text
    assert text.count(report.KEPT_MARKER) == 1 and text.rstrip().endswith("kept")
    report.bundle("# newer\n", workdir, path, {})  # and again: still once
    assert path.read_text().count("## By hand") == 1
    path.write_text("# no marker\n")
    report.bundle("# plain\n", workdir, path, {})
    assert path.read_text() == "# plain\n"
