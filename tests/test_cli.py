"""The scripts' edge: the persistent compilation cache is on by default (a second run of the same
shapes reads compiled programs instead of compiling), can be pointed elsewhere or turned off, and
a bad cache folder is a one-line error."""
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from anisotropy_jax import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def restore_jax_cache_config():
    saved = (jax.config.jax_compilation_cache_dir,
             jax.config.jax_persistent_cache_min_compile_time_secs)
    yield
    jax.config.update("jax_compilation_cache_dir", saved[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", saved[1])


def test_cache_setting_off_folder_and_default(tmp_path, monkeypatch, restore_jax_cache_config):
    assert cli.enable_compilation_cache("off") is None
    folder = cli.enable_compilation_cache(str(tmp_path / "cache"))
    assert folder == tmp_path / "cache" and folder.is_dir()
    assert jax.config.jax_compilation_cache_dir == str(folder)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "env"))
    assert cli.enable_compilation_cache("default") == tmp_path / "env"  # the environment wins
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cli.enable_compilation_cache("default") == tmp_path / "xdg" / "anisotropy_jax" / "jax"


def test_second_run_reads_the_cache_and_a_bad_folder_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    env["MPLBACKEND"] = "Agg"
    cache = tmp_path / "cache"
    args = [sys.executable, str(ROOT / "experiments" / "sweep.py"),
            "--config=sweep:smoke",
            f"--compilation_cache={cache}", "--config.num_seeds=1"]
    first = subprocess.run(args + [f"--workdir={tmp_path / 'a'}"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    entries = sorted(p.name for p in cache.iterdir())
    assert entries, "nothing was cached"
    second = subprocess.run(args + [f"--workdir={tmp_path / 'b'}"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert sorted(p.name for p in cache.iterdir()) == entries  # read, not recompiled and added
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = subprocess.run(args[:-2] + [f"--compilation_cache={blocker / 'sub'}",
                                      f"--workdir={tmp_path / 'c'}"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 2 and len(lines) == 1, bad.stderr
    assert lines[0].startswith("error: --compilation_cache: cannot create"), lines


def test_phase_times_are_written_only_with_a_path(tmp_path):
    import json
    import time

    silent = cli.PhaseTimes(None)
    silent.mark("a")
    silent.write()
    assert silent.stamps == [] and not list(tmp_path.iterdir())
    before = time.time()
    phases = cli.PhaseTimes(tmp_path / "sub" / "phases.json")
    phases.mark("a")
    phases.mark("b")
    phases.write()
    stamps = json.loads((tmp_path / "sub" / "phases.json").read_text())["stamps"]
    assert [name for name, _ in stamps] == ["a", "b"]
    assert before <= stamps[0][1] <= stamps[1][1] <= time.time()


def test_exit_without_teardown_flushes_output_keeps_the_status_and_skips_atexit():
    code = ("import atexit, sys; from anisotropy_jax import cli; "
            "atexit.register(print, 'atexit ran'); print('out', end=''); sys.stderr.write('err'); "
            "cli.exit_without_teardown(3)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out", "err")


def test_device_memory_on_demand_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    cli.allocate_device_memory_on_demand()
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    cli.allocate_device_memory_on_demand()
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
