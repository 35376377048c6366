"""The scripts filed beside committed results under docs/results/ print their numbers and write
into the repository only where a flag asks them to."""
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROBE = ROOT / "docs/results/extreme/intrinsic_dimension/bias_probe.py"


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bias_probe_writes_its_json_only_where_asked(tmp_path, monkeypatch, capsys):
    probe = _load(PROBE)
    monkeypatch.setattr(probe, "N", 40)  # the probe's shape, small: the same code path
    monkeypatch.setattr(probe, "DIM", 8)
    monkeypatch.setattr(probe, "SEEDS", (0, 1))
    monkeypatch.setattr(probe, "BIAS_NORMS", (0.0, 16.0))
    before = {p: p.read_bytes() for p in PROBE.parent.iterdir() if p.is_file()}
    probe.main([])
    assert {p: p.read_bytes() for p in PROBE.parent.iterdir() if p.is_file()} == before
    assert "TwoNN / GRIDE on x = z + s·u, N = 40, D = 8" in capsys.readouterr().out
    probe.main(["--json", str(tmp_path / "rows.json")])
    doc = json.loads((tmp_path / "rows.json").read_text())
    assert doc["n"] == 40 and len(doc["rows"]) == 2 * 2 + 2  # float32 × seeds, float64 seed 0
    assert {p: p.read_bytes() for p in PROBE.parent.iterdir() if p.is_file()} == before
