"""The installed command line (`anisotropy-jax`, setup.py's console entry point, and
`python -m anisotropy_jax`): it runs a study from any folder with a named config, `show DIR`
reprints the table of a finished workdir, --help lists the variants and every `--config.` field
with its default and meaning, --print_config prints the resolved config without running, and
bad commands, names and folders are one line."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from anisotropy_jax import commands, configs, results
from anisotropy_jax.config.docs import attribute_docs, field_table
from anisotropy_jax.studies.train import report as train_report
from tests import processes

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")  # pip install -e . made it


@pytest.fixture(scope="module")
def env():
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]  # the run's, shared (tests/conftest.py)
    environ = processes.one_device(dict(os.environ))
    environ.update(JAX_COMPILATION_CACHE_DIR=str(cache), MPLBACKEND="Agg",
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    return environ


def _run(args, cwd, env, command=(COMMAND,)):
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_a_study_runs_from_another_folder_and_show_reprints_its_table(env, tmp_path):
    run = _run(["sweep", "--config=sweep:smoke", "--config.num_seeds=1", "--workdir=out"],
               tmp_path, env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Unable to initialize backend" not in run.stderr  # JAX's probe of absent TPUs
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["config"]["model"]["d_model"] == 64 and len(doc["bias_norms"]) == 7
    shown = _run(["show", "out"], tmp_path, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() and run.stdout.rstrip().endswith(shown.stdout.rstrip())
    assert commands.identify(doc) == "sweep"
    assert doc["provenance"]["schema_version"] == results.RESULTS_SCHEMA_VERSION


def test_a_workdir_takes_the_same_run_again_and_refuses_another_config(env, tmp_path):
    """The script and the command claim a workdir under one name: the same config through the
    script overwrites the command's run; another config is one line, exit 2, files untouched."""
    run = ["sweep", "--config=sweep:smoke", "--config.num_seeds=1", "--workdir=out"]
    assert _run(run, tmp_path, env).returncode == 0
    first = json.loads((tmp_path / "out" / "results.json").read_text())["provenance"]
    script = [str(ROOT / "experiments" / "sweep.py"),
              "--config=sweep:smoke",
              "--config.num_seeds=1", "--workdir=out"]
    again = _run(script, tmp_path, env, command=(sys.executable,))
    assert again.returncode == 0, again.stderr[-3000:]
    second = json.loads((tmp_path / "out" / "results.json").read_text())["provenance"]
    assert second["start_time"] > first["end_time"]  # run again, not refused
    files = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    other = _run(script[:-2] + ["--config.num_seeds=2", "--workdir=out"], tmp_path, env,
                 command=(sys.executable,))
    assert other.returncode == 2 and other.stderr.splitlines() == [
        "error: --workdir: out holds a `sweep` run of another config (num_seeds=1 there, 2 "
        "here); use another --workdir, or delete out to start again"], other.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == files


def test_show_refuses_results_of_a_newer_schema(tmp_path):
    doc = json.loads((ROOT / "docs/results/depth/cpu/results.json").read_text())
    (tmp_path / "newer").mkdir()
    doc["provenance"]["schema_version"] = results.RESULTS_SCHEMA_VERSION + 1
    (tmp_path / "newer" / "results.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit) as exit_:
        commands.show(str(tmp_path / "newer"))
    assert exit_.value.code == 2
    doc["provenance"]["schema_version"] = results.RESULTS_SCHEMA_VERSION
    (tmp_path / "newer" / "results.json").write_text(json.dumps(doc))
    assert commands.show(str(tmp_path / "newer")).strip()


def test_show_names_the_study_of_every_committed_result():
    expected = {"docs/results/sweep/control": "sweep", "docs/results/depth/cpu": "depth",
                "docs/results/train/clm_small": "seeds",
                "docs/results/train/clm_small/seed_0": "dynamics",
                "docs/results/pretrained/all-MiniLM-L6-v2": "pretrained",
                "docs/results/cross_modal/cross_modal": "cross_modal",
                "docs/results/embeddings": "embeddings",
                "docs/results/extreme/smoke": "extreme"}
    for folder, name in expected.items():
        doc = json.loads((ROOT / folder / "results.json").read_text())
        assert commands.identify(doc) == name, folder
        assert commands.show(str(ROOT / folder)).strip(), folder


def test_show_reads_the_study_from_the_provenance_and_guesses_only_schema_1():
    doc = json.loads((ROOT / "docs/results/depth/cpu/results.json").read_text())
    assert "study" not in doc["provenance"] and commands.identify(doc) == "depth"  # schema 0/1
    doc["provenance"].update(schema_version=2, study="sweep")  # depth's keys, sweep's name
    assert commands.identify(doc) == "sweep"
    doc["provenance"]["study"] = "benchmarks.train_throughput"  # not a study's results
    assert commands.identify(doc) is None
    written = results.Provenance().finish("depth")
    assert written["study"] == "depth"
    assert written["schema_version"] == results.RESULTS_SCHEMA_VERSION


def test_old_command_spellings_with_a_hyphen_still_run():
    assert commands.command_name("cross-modal") == "cross_modal" in commands.COMMANDS


def test_show_and_unknown_commands_are_one_line(env, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.json").write_text('{"something": 1}')
    for args, says in ((["show", "nowhere"], "error: nowhere: no such folder"),
                       (["show", "empty"], "error: empty: no results.json: not a finished run"),
                       (["show", "other"], f"error: {pathlib.Path('other') / 'results.json'}: "
                                           "not the results of a study of this package"),
                       (["show"], "error: usage: anisotropy-jax show [--csv] DIR"),
                       (["sweeep"], "error: unknown command 'sweeep'"),
                       (["sweep", "--config=swep:smoke", "--workdir=x"],
                        "error: --config: 'swep' is neither a config file nor a named config")):
        proc = _run(args, tmp_path, env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), (
            args, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "other"]


def test_python_m_is_the_same_command_and_lists_every_command(env, tmp_path):
    proc = _run(["--help"], tmp_path, env, command=(sys.executable, "-m", "anisotropy_jax"))
    assert proc.returncode == 0, proc.stderr
    for name in (*commands.COMMANDS, "show"):
        assert f"\n  {name} " in proc.stdout, name
    assert _run([], tmp_path, env).returncode == 2  # no command: the list, and status 2


def test_every_script_and_command_has_a_config_and_a_study():
    assert set(commands.COMMANDS) == {"sweep", "depth", "train", "seeds", "dynamics",
                                      "pretrained", "cross_modal", "extreme", "embeddings",
                                      "series", "report", "normalizations"}
    for name in commands.COMMANDS:
        assert commands.study_name(name) in configs.names(), name
        assert callable(commands.study(name).validate), name
    scripts = {path.stem: path.read_text() for path in (ROOT / "experiments").glob("*.py")}
    called = {name for text in scripts.values() for name in commands.COMMANDS
              if f'commands.script("{name}"' in text}
    assert called == set(commands.COMMANDS) and len(scripts) == len(commands.COMMANDS)


def test_help_lists_the_flags_variants_and_every_field_with_its_default_and_meaning(env, tmp_path):
    proc = _run(["train", "--config=train:mlm+smoke", "--help"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for expected in ("usage: anisotropy-jax train", "--workdir", "--progress (default: True)",
                     "--print_config", "Variants (--config=train:VARIANT)", "  small ",
                     "--config.optim.warmup_steps=5", "--config.model.d_model=64",
                     "--config.optim.warmup_steps=5\n      linear warmup from learning_rate"):
        assert expected in text, expected
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", configs.names())
def test_every_field_of_every_config_has_a_meaning_and_every_variant_a_description(name):
    module = configs.module(name)
    for variant in (None, *module.VARIANTS):
        for field, _, meaning in field_table(module.get_config(variant), module.FIELD_DOCS):
            assert meaning, f"{name}:{variant} --config.{field} has no meaning in its docstring"
    described = dict(configs.variants(module))
    assert set(described) >= set(module.VARIANTS) and all(described.values()), described
    text = configs.describe(str(configs.path(name)))
    for field, _, _ in field_table(module.get_config(None), module.FIELD_DOCS):
        assert f"--config.{field}=" in text, field


def test_attribute_docs_reads_shared_and_continued_entries():
    class Example:
        """What it is.

        Attributes:
          a, b: shared
            and continued.
          c: alone.
        Not a field: text after the section.
        """

    assert attribute_docs(Example) == {"a": "shared and continued.", "b": "shared and continued.",
                                       "c": "alone."}


def test_print_config_prints_the_resolved_config_and_runs_nothing(env, tmp_path):
    proc = _run(["depth", "--config.num_layers=5", "--config=depth:smoke", "--print_config"],
                tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    want = configs.module("depth").get_config("smoke")
    want.num_layers = 5
    assert json.loads(proc.stdout) == json.loads(want.to_json_best_effort())
    script = _run([str(ROOT / "experiments" / "train.py"), "--config=train:smoke",
                   "--print_config"], tmp_path, env, command=(sys.executable,))
    assert script.returncode == 0 and json.loads(script.stdout)["steps"] == 40, script.stderr
    assert not list(tmp_path.iterdir())


def test_named_configs_resolve_to_the_package_files(tmp_path, monkeypatch):
    sweep = configs.path("sweep")
    assert configs.resolve("sweep:control") == f"{sweep}:control"
    with pytest.raises(KeyError):  # names before one name per study are not kept
        configs.resolve("bias_sweep")
    assert configs.resolve(":smoke", own=f"{configs.path('depth')}:cpu") == \
        f"{configs.path('depth')}:smoke"
    real = ROOT / "anisotropy_jax" / "configs" / "sweep.py"
    assert configs.resolve(f"{real}:smoke") == f"{real}:smoke"  # an existing file stays
    monkeypatch.chdir(tmp_path)  # a name is the package's file from any folder
    assert configs.resolve("sweep:smoke") == f"{sweep}:smoke"
    with pytest.raises(KeyError):
        configs.resolve("no_such_config:smoke")
    with pytest.raises(KeyError):
        configs.resolve("elsewhere/sweep.py")


def test_show_prints_a_training_run_whose_correlations_are_partly_undefined(tmp_path):
    """JSON holds an undefined correlation as "nan" (results.to_jsonable): `show` prints it as
    the table's mark for an undefined value, with the note that says why, instead of failing on
    the string."""
    doc = json.loads((ROOT / "docs/results/train/clm_small/seed_0/results.json").read_text())
    doc["provenance"].update(schema_version=results.RESULTS_SCHEMA_VERSION, study="train")
    doc["correlation"]["key_term_share"]["rho"][1] = "nan"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(doc))
    shown = commands.show(str(tmp_path / "run"))
    assert ("spearman(entropy, key_term_share) across 16 heads, by step: 0:+0.67 "
            f"1:{train_report.UNDEFINED} 2:+0.62") in shown
    assert train_report.UNDEFINED_NOTE in shown and "nan" not in shown


def test_show_help_exits_0_with_its_usage(capsys):
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exit_:
            commands.main(["anisotropy-jax", "show", flag])
        assert exit_.value.code == 0
        assert capsys.readouterr().out.startswith("usage: anisotropy-jax show [--csv] DIR")


def test_dynamics_of_a_folder_that_is_not_a_training_run_is_one_line(env, tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"model_dir": "x"}')
    proc = _run(["dynamics", "--workdir=other"], tmp_path, env)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"error: --workdir: {pathlib.Path('other') / 'config.json'} holds no training config; "
        "is it a training run (anisotropy-jax train)?"], proc.stderr


def test_show_csv_prints_the_tidy_table_of_a_workdir_or_a_folder_of_them(capsys):
    commands.main(["anisotropy-jax", "show", "--csv", str(ROOT / "docs/results/train/clm_small")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("study,seed,step,state,layer,head,average_cosine,")
    assert len(lines) == 1 + len(results.load(ROOT / "docs/results/train/clm_small"))
    shown = commands.show(str(ROOT / "docs/results/report"))  # no results.json: its runs
    assert "== sweep ==" in shown and "== training/clm ==" in shown
