"""`--config=STUDY:VARIANT` is one syntax in every study (config/defaults.py `with_variants`):
names joined by '+', applied left to right, `smoke` last wherever it stands, so that `X+smoke`
(= `smoke+X`) is variant X's structure at smoke's sizes; ':' between names, an unknown name and
two variants that set one field differently are refused alike, in one line. Nothing here runs a
study."""
import copy
import os
import pathlib
import subprocess
import sys

import pytest

from anisotropy_jax import configs
from anisotropy_jax.config.defaults import SMOKE, apply_settings
from tests import processes

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")  # pip install -e . made it

# What of variant X survives in X+smoke (the fields where X+smoke differs from smoke): X's
# structure, never a size. A variant missing here (a study's own, or a new one) keeps nothing:
# it is a size, and X+smoke is smoke.
STRUCTURE = {
    "depth": {"llm": {"model.causal", "model.layer_norm_eps", "model.precision"},
              "lecun": {"model.init"}, "scaled": {"scale_with_depth"}},
    "embeddings": {"gpu": {"precision", "optim.learning_rate"}},
    "extreme": {"intervention": {"inputs", "measure"}},
    "report": {"gpu": {"embeddings.precision", "embeddings.optim.learning_rate"},
               "full": {"embeddings.precision", "embeddings.optim.learning_rate"}},
    "sweep": {"pre_ln": {"model.norm_position", "model.layer_norm_eps"}, "lecun": {"model.init"},
              "attention_only": {"model.use_mlp"},
              **{name: {"compare_fields", "compare_values"}
                 for name in ("post_vs_pre", "init_std", "temperature", "control", "fixed_norm",
                              "per_sequence", "controls")},
              "normalizations": {"compare_fields", "compare_values", "sink_metrics"}},
    "train": {"mlm": {"objective", "model.layer_norm_eps"}, "gpu": {"model.precision"}},
}


def _cases():
    return [(name, variant) for name in configs.names()
            for variant in configs.module(name).VARIANTS if variant != SMOKE]


def _flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _at(config, path):
    for key in path.split("."):
        config = config[key]
    return config


@pytest.mark.parametrize("name, variant", _cases())
def test_x_plus_smoke_is_smoke_sizes_over_x(name, variant):
    """get_config('X+smoke') = get_config('smoke+X') = X's config with every field smoke sets at
    smoke's value; what X adds to smoke is its structure (STRUCTURE), never a size."""
    module = configs.module(name)
    smoke = module.get_config(SMOKE)
    want = apply_settings(module.get_config(variant), {
        path: copy.deepcopy(_at(smoke, path)) for path in module.SETTINGS.get(SMOKE, {})})
    for arg in (f"{variant}+{SMOKE}", f"{SMOKE}+{variant}", f" {SMOKE} + {variant} "):
        assert module.get_config(arg).to_dict() == want.to_dict(), arg
    got, small = _flat(want.to_dict()), _flat(smoke.to_dict())
    kept = {path for path in set(got) | set(small) if got.get(path) != small.get(path)}
    assert kept == STRUCTURE.get(name, {}).get(variant, set()), kept


@pytest.mark.parametrize("name", configs.names())
def test_a_colon_between_variants_is_refused_alike_in_every_study(name):
    module = configs.module(name)
    first = next((v for v in module.VARIANTS if v not in ("default", SMOKE)), "default")
    with pytest.raises(ValueError) as error:
        module.get_config(f"{first}:{SMOKE}")
    assert str(error.value) == (f"config: '{first}:{SMOKE}': variants combine with '+', not ':'; "
                                f"write '{first}+{SMOKE}'")


@pytest.mark.parametrize("name", configs.names())
def test_an_unknown_variant_lists_the_variants(name):
    module = configs.module(name)
    for arg in ("nope", f"{SMOKE}+nope"):
        with pytest.raises(ValueError) as error:
            module.get_config(arg)
        message = str(error.value)
        assert message.startswith("config: unknown variant 'nope'; choose from (") and \
            "\n" not in message, message
        assert all(repr(v) in message for v in module.VARIANTS), message
    with pytest.raises(ValueError, match=f"names '{SMOKE}' twice"):
        module.get_config(f"{SMOKE}+{SMOKE}")


@pytest.mark.parametrize("name, arg, field", [
    ("train", "mlm+clm", "objective"), ("train", "small+gpu", "model.d_model"),
    ("depth", "cpu+llm", "widths"), ("sweep", "control+controls", "compare_values"),
    ("report", "gpu+full", "size"), ("normalizations", "cpu+full", "shakespeare.model.d_model")])
def test_two_variants_that_set_one_field_differently_are_refused(name, arg, field):
    first, second = arg.split("+")
    with pytest.raises(ValueError, match=f"^config: '{first}' and '{second}' both set"):
        configs.module(name).get_config(arg)
    with pytest.raises(ValueError, match=f"both set {field}; name one of them$"):
        configs.module(name).get_config(arg)


def test_variants_that_set_other_fields_combine_left_to_right():
    sweep, train = configs.module("sweep"), configs.module("train")
    c = sweep.get_config("pre_ln+controls+smoke")
    assert (c.model.norm_position, c.model.d_model, len(c.compare_values)) == ("pre", 64, 4)
    c = train.get_config("mlm+gpu")
    assert (c.objective, c.model.layer_norm_eps, c.model.d_model) == ("mlm", 1e-12, 384)
    assert train.get_config("default").to_dict() == train.get_config(None).to_dict()


@pytest.fixture(scope="module")
def env():
    environ = processes.one_device(dict(os.environ))
    environ.update(MPLBACKEND="Agg")
    return environ


@pytest.mark.parametrize("args, says", [
    (["sweep", "--config=sweep:control:smoke"],
     "error: --config: config: 'control:smoke': variants combine with '+', not ':'; "
     "write 'control+smoke'"),
    (["train", "--config=train:gpu+smok"], "error: --config: config: unknown variant 'smok'; "
                                           "choose from ('mlm', 'clm', 'smoke', 'small', 'gpu')")])
def test_the_command_says_a_bad_variant_in_one_line_and_exits_2(env, tmp_path, args, says):
    proc = subprocess.run([COMMAND, *args, "--workdir=out"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), proc.stderr
    assert not list(tmp_path.iterdir())


def test_print_config_shows_x_at_smoke_size(env, tmp_path):
    proc = subprocess.run([COMMAND, "train", "--config=train:gpu+smoke", "--print_config"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert '"precision": "default"' in proc.stdout and '"d_model": 64' in proc.stdout
    assert '"steps": 40' in proc.stdout
