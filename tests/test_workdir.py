"""A workdir holds one run (`protocol.workdir_conflict`): every command that owns its workdir
records itself and its resolved config in WORKDIR/workdir.json and refuses, with one line and
exit status 2 before its config is validated or anything compiled, a run of another command or
another config into it; the same command and config again may run (resume or overwrite). The
sweep's own rerun and refusal run end to end in tests/test_commands.py."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from anisotropy_jax import commands, configs
from anisotropy_jax.protocol import WORKDIR_FILE, workdir_conflict, workdir_record
from tests import processes

COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")
CLAIMED = [name for name, command in commands.COMMANDS.items() if command.claims]


def _claimed(folder, command, config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WORKDIR_FILE).write_text(json.dumps(workdir_record(command, config)))
    return folder


def test_a_new_folder_and_the_same_run_are_allowed(tmp_path):
    config = configs.module("depth").get_config("smoke")
    assert workdir_conflict(tmp_path / "new", "depth", config) is None
    assert workdir_conflict(tmp_path, "depth", config) is None  # a folder without a record
    folder = _claimed(tmp_path / "run", "depth", config)
    assert workdir_conflict(folder, "depth", configs.module("depth").get_config("smoke")) is None
    nan = {"a": float("nan"), "b": (1, 2)}  # NaN is equal to itself here; a tuple is a list
    assert workdir_conflict(_claimed(tmp_path / "nan", "x", nan), "x", dict(nan)) is None


def test_another_config_is_refused_naming_the_first_field_that_differs(tmp_path):
    config = configs.module("depth").get_config("smoke")
    folder = _claimed(tmp_path / "run", "depth", config)
    changed = config.copy_and_resolve_references()
    changed.num_layers = config.num_layers + 1
    changed.seed = config.seed + 1
    assert workdir_conflict(folder, "depth", changed) == (
        f"--workdir: {folder} holds a `depth` run of another config (num_layers="
        f"{config.num_layers} there, {config.num_layers + 1} here); use another --workdir, or "
        f"delete {folder} to start again")
    nested = _claimed(tmp_path / "nested", "x", {"model": {"d": 4, "n": 2}})
    assert "(model.n=2 there, null here)" in workdir_conflict(nested, "x", {"model": {"d": 4}})


def test_another_command_and_an_unreadable_record_are_refused(tmp_path):
    folder = _claimed(tmp_path / "run", "train", {"steps": 40})
    assert workdir_conflict(folder, "sweep", {"steps": 40}) == (
        f"--workdir: {folder} holds a run of `train`, not `sweep`; use another --workdir")
    (folder / WORKDIR_FILE).write_text("{half")
    assert workdir_conflict(folder, "train", {"steps": 40}) == (
        f"--workdir: {folder / WORKDIR_FILE} is unreadable (JSONDecodeError); use another "
        "--workdir")


def test_the_folders_shared_by_design_are_the_only_unclaimed_ones():
    """dynamics analyses a training run's workdir; a reproduction checks each study's part."""
    assert set(commands.COMMANDS) - set(CLAIMED) == {"dynamics", "report"}


@pytest.mark.parametrize("name", CLAIMED)
def test_every_claimed_command_refuses_another_run_before_validating(name, tmp_path):
    """Its default config, unvalidated (the pretrained one lacks its model_dir; the training one
    would load its corpus): the refusal comes first, one line, and the folder is left as it
    was."""
    folder = _claimed(tmp_path / "run", "another", {"x": 1})
    before = (folder / WORKDIR_FILE).read_text()
    env = processes.one_device(dict(os.environ))
    proc = subprocess.run([COMMAND, name, f"--workdir={folder}"], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == [
        f"error: --workdir: {folder} holds a run of `another`, not `{name}`; use another "
        "--workdir"], proc.stderr[-3000:]
    assert [p.name for p in folder.iterdir()] == [WORKDIR_FILE]
    assert (folder / WORKDIR_FILE).read_text() == before
