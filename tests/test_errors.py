"""The inputs that used to end in a traceback are one stderr line "error: ...", a non-zero exit and
nothing half-written: a workdir that is a file, a read-only workdir, a full disk (while the
figures are saved, in this process and in the figure workers), an interrupted run (Ctrl-C: exit
130), an empty training corpus, a single image, a WAV of one sample and a model path that is a
file. The disk faults are simulated in every Python process of the run by a `sitecustomize`
module on PYTHONPATH (`FAULTS`): writes under one folder fail with the errno asked for."""
import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import wave

import numpy as np
import pytest

from tests import processes

from anisotropy_jax import cli, media
from anisotropy_jax.protocol import Interrupted

ROOT = pathlib.Path(__file__).resolve().parent.parent
SWEEP = [sys.executable, str(ROOT / "experiments" / "sweep.py"),
         "--config=sweep:smoke",
         "--config.num_seeds=1"]
FAULTS = '''
import builtins, errno, io, os
_ROOT = os.path.realpath(os.environ["FAULT_ROOT"])
_ERRNO = getattr(errno, os.environ["FAULT_ERRNO"])
_SUFFIX = os.environ.get("FAULT_SUFFIX", "")
_open, _os_open, _mkdir = builtins.open, os.open, os.mkdir


def _hit(file):
    if isinstance(file, int):
        return False
    path = os.path.realpath(os.fspath(file))
    inside = path == _ROOT or path.startswith(_ROOT + os.sep)
    return inside and _SUFFIX in os.path.basename(path)


class _Full:  # a file on a full disk: opening works, writing does not
    def __init__(self, f):
        self._f = f

    def write(self, data):
        raise OSError(_ERRNO, os.strerror(_ERRNO))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _faulty_open(file, mode="r", *args, **kwargs):
    writing = any(c in mode for c in "wax+") and _hit(file)
    if writing and _ERRNO != errno.ENOSPC:
        raise OSError(_ERRNO, os.strerror(_ERRNO), os.fspath(file))
    f = _open(file, mode, *args, **kwargs)
    return _Full(f) if writing else f


def _faulty_os_open(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _ERRNO != errno.ENOSPC and _hit(path):
        raise OSError(_ERRNO, os.strerror(_ERRNO), os.fspath(path))
    return _os_open(path, flags, *args, **kwargs)


def _faulty_mkdir(path, *args, **kwargs):
    if _ERRNO != errno.ENOSPC and _hit(path):
        raise OSError(_ERRNO, os.strerror(_ERRNO), os.fspath(path))
    return _mkdir(path, *args, **kwargs)


builtins.open = io.open = _faulty_open
os.open, os.mkdir = _faulty_os_open, _faulty_mkdir
'''


@pytest.fixture(scope="module")
def env():
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]  # the run's, shared (tests/conftest.py)
    environ = processes.one_device(dict(os.environ))
    environ.update(JAX_COMPILATION_CACHE_DIR=str(cache), MPLBACKEND="Agg",
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    return environ


def _faulty_env(env, tmp_path, root, errno_name, suffix=""):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FAULTS)
    return dict(env, PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]),
                FAULT_ROOT=str(root), FAULT_ERRNO=errno_name, FAULT_SUFFIX=suffix)


def _one_line(proc, status):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == status and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr, lines
    return lines[0]


def test_a_workdir_that_is_a_file_is_one_line(env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for workdir, says in ((blocker, f"--workdir: {blocker} is a file, not a folder"),
                          (blocker / "sub", f"--workdir: {blocker / 'sub'} is inside {blocker}, "
                                            "which is a file")):
        proc = subprocess.run(SWEEP + [f"--workdir={workdir}"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert _one_line(proc, 2).startswith(f"error: {says}")
    assert blocker.read_text() == "x"


def test_a_read_only_workdir_is_one_line_and_nothing_is_written(env, tmp_path):
    root = tmp_path / "readonly"
    root.mkdir()
    faulty = _faulty_env(env, tmp_path, root, "EROFS")
    for workdir in (root, root / "run"):
        proc = subprocess.run(SWEEP + [f"--workdir={workdir}"], env=faulty, capture_output=True,
                              text=True, timeout=300)
        assert _one_line(proc, 2) == (f"error: --workdir: cannot write in {root} "
                                      "(Read-only file system)")
    assert not list(root.iterdir())


@pytest.mark.parametrize("figure_processes", [0, 2])
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_results(env, tmp_path,
                                                                       figure_processes):
    """The figures hit the full disk (PIL writes them, here or in the figure workers): one line
    naming the figure, exit 1, no results.json and no temporary file left."""
    workdir = tmp_path / "run"
    faulty = _faulty_env(env, tmp_path, workdir, "ENOSPC", suffix=".png")
    proc = subprocess.run(SWEEP + [f"--workdir={workdir}", f"--figure_processes={figure_processes}"],
                          env=faulty, capture_output=True, text=True, timeout=300)
    line = _one_line(proc, 1)
    assert line.startswith(f"error: {workdir / 'figures'}/") and line.endswith(
        ".png: no space left on device"), line
    assert not (workdir / "results.json").exists()
    assert not [p for p in workdir.rglob("*") if p.name.endswith(".tmp")]


def test_user_errors_turn_ctrl_c_and_disk_errors_into_one_line(capsys):
    for raised, status, says in (
            (KeyboardInterrupt(), 130, "interrupted; rerun the same command to resume"),
            (Interrupted(7), 130, "interrupted at step 7; rerun the same command to resume"),
            (OSError(errno.ENOSPC, "No space left on device", "/x/results.npz"), 1,
             "/x/results.npz: no space left on device"),
            (PermissionError(errno.EACCES, "Permission denied", "/x/a.json"), 1,
             "/x/a.json: permission denied"),
            # a sweep's or a depth run's non-finite result, one line and exit 1 alike
            (FloatingPointError("depth sweep overflow: metric 'output_cosine' is not finite"), 1,
             "depth sweep overflow: metric 'output_cosine' is not finite")):
        with pytest.raises(SystemExit) as exit_:
            with cli.user_errors():
                raise raised
        assert exit_.value.code == status
        assert capsys.readouterr().err == f"error: {says}\n"
    with pytest.raises(OSError, match="Bad file descriptor"):  # not a user's error: a trace
        with cli.user_errors():
            raise OSError(errno.EBADF, "Bad file descriptor")


def test_ctrl_c_during_a_sweep_is_one_line_exit_130_and_no_results(env, tmp_path):
    workdir = tmp_path / "run"
    # Unbuffered: piped stdout is block-buffered, and "chunk 1/" could then arrive only at exit,
    # after the run had finished (exit 0 under load).
    proc = subprocess.Popen(SWEEP + [f"--workdir={workdir}", "--config.chunk_size=1",
                                     "--config.bias_norms=" + repr(tuple(range(48)))],
                            env=dict(env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            # an xdist worker may ignore SIGINT: restore the default in the child
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:  # wait until it computes
        if "chunk 1/" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130 and lines == [
        "error: interrupted; rerun the same command to resume"], (proc.returncode, err[-3000:])
    assert not (workdir / "results.json").exists()


# --------------------------------------------------------------------------------------------
# Inputs

def _wav(path, samples, rate=16000):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.asarray(samples) * 32767).astype("<i2").tobytes())


def test_a_single_image_and_a_one_sample_wav_are_one_line(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((32, 40, 3), np.uint8)).save(tmp_path / "a.png")
    with pytest.raises(media.MediaError, match=r"a.png: 1 image; the measurement compares "
                                               r"inputs: give at least 2$"):
        media.load_images([tmp_path / "a.png"])
    assert media.load_images([tmp_path / "a.png"] * 2).shape[0] == 2
    _wav(tmp_path / "one.wav", [0.5])
    _wav(tmp_path / "tone.wav", 0.1 * np.sin(np.arange(8000) / 5))
    with pytest.raises(media.MediaError, match=r"one.wav: 1 sample \(0.062 ms at 16000 Hz\), "
                                               r"shorter than one 25 ms analysis window"):
        media.load_audio([tmp_path / "tone.wav", tmp_path / "one.wav"], 16000)
    with pytest.raises(media.MediaError, match="tone.wav: 1 audio file; the measurement"):
        media.load_audio([tmp_path / "tone.wav"], 16000)
    assert len(media.load_audio([tmp_path / "tone.wav"] * 2, 16000)) == 2


def test_pretrained_inputs_and_a_model_path_that_is_a_file_are_one_line(env, tmp_path):
    """End to end through the installed command: the offline DINOv2-S on one image, Whisper
    tiny.en on a WAV of one sample, and a model_dir that is a file."""
    from PIL import Image

    from anisotropy_jax.models.families import vit, whisper

    images, wavs, out = tmp_path / "images", tmp_path / "wavs", tmp_path / "out"
    images.mkdir()
    wavs.mkdir()
    Image.fromarray(np.zeros((32, 40, 3), np.uint8)).save(images / "a.png")
    _wav(wavs / "a.wav", 0.1 * np.sin(np.arange(8000) / 5))
    _wav(wavs / "b.wav", [0.5])
    model_file = tmp_path / "model.json"
    model_file.write_text("{}")
    command = [str(pathlib.Path(sys.executable).parent / "anisotropy-jax"), "pretrained",
               "--config=pretrained:smoke", f"--workdir={out}"]
    for model, inputs, says in (
            (vit.packaged_dinov2_onnx(), images, f"inputs: {images / 'a.png'}: 1 image"),
            (whisper.packaged_tiny_en_dir(), wavs, f"inputs: {wavs / 'b.wav'}: 1 sample"),
            (model_file, None, f"model_dir: {model_file}: is a file, not a model directory")):
        extra = [f"--config.inputs={inputs}"] if inputs else []
        proc = subprocess.run(command + [f"--config.model_dir={model}", *extra], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert _one_line(proc, 2).startswith(f"error: {says}")
    assert not out.exists()


def test_empty_training_corpus_is_one_line(env, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"),
         "--config=train:smoke",
         f"--workdir={tmp_path / 'run'}", f"--config.data.source={empty}"],
        env=env, capture_output=True, text=True, timeout=300)
    assert _one_line(proc, 2) == f"error: data.source: {empty} is empty; give a text file to " \
                                 "train on"
    assert not (tmp_path / "run").exists()


def test_result_files_respect_the_umask(tmp_path):
    from anisotropy_jax import results

    old = os.umask(0o027)
    try:
        for write in (lambda p: results.write_json(p, {"a": 1}),
                      lambda p: results.write_text(p, "x"),
                      lambda p: results.write_npz(p, {"a": np.zeros(2)})):
            path = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
            write(path)
            assert path.stat().st_mode & 0o777 == 0o640, oct(path.stat().st_mode)
    finally:
        os.umask(old)
    assert json.loads((tmp_path / "f0").read_text()) == {"a": 1}
