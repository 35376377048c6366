"""experiments/extreme.py as CI runs it: the `:smoke` variant (the packaged
all-MiniLM-L6-v2, 2 untrained seeds) with 4 sentences, end to end in a subprocess; and a bad
flag fails in one line before anything is loaded."""
import json
import pathlib
import subprocess
import sys

from anisotropy_jax import commands

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "extreme.py"
CONFIG = REPO / "anisotropy_jax" / "configs" / "extreme.py"


def _run(*args, timeout=900):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_smoke_script_writes_results_and_the_table(tmp_path):
    proc = _run(f"--config={CONFIG}:smoke", "--config.num_sentences=4", f"--workdir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert commands.identify(doc) == "extreme"
    model = doc["models"]["all-MiniLM-L6-v2"]
    assert model["seeds"] == [0, 1] and set(model["inputs"]) == {"natural", "random", "repeated"}
    rates = model["inputs"]["natural"]["trained"]["attention"]["sink_rate"]
    assert len(rates) == 6 and all(0.0 <= r <= 1.0 for r in rates)
    assert model["storage_bytes"]["per_model"] == 9 * model["storage_bytes"]["per_forward"]
    assert "| layer_6 |" in proc.stdout and (tmp_path / "summary.md").is_file()


def test_bad_flag_fails_in_one_line(tmp_path):
    proc = _run(f"--config={CONFIG}:smoke", "--config.epsilon=2.0", f"--workdir={tmp_path}",
                timeout=300)
    assert proc.returncode == 2
    assert "epsilon" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
