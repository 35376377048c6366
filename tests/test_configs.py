"""The studies' settings files (anisotropy_jax/configs/<study>.py): each builds every named variant,
each variant converts to the typed configs the study runs, and each file's defaults are its
dataclasses' defaults (written once, in the dataclass)."""
import dataclasses
import importlib.util
import json
import pathlib

import pytest

import sys

from anisotropy_jax import config, results
from anisotropy_jax.configs.depth import depth_config_from_mapping
from anisotropy_jax.configs.extreme import ExtremeConfig
from anisotropy_jax.configs.report import reproduce_config_from_mapping
from anisotropy_jax.configs.sweep import DEFAULT_BIAS_NORMS, default_label, sweep_configs_from_mapping
from anisotropy_jax.configs.normalizations import NormalizationGridConfig, grid_config_from_mapping
from anisotropy_jax.config import (AnalysisConfig, BlockConfig, DataConfig, ModelSpec, OptimConfig,
                                   TrainConfig, config_dict, field_names, from_mapping)
from anisotropy_jax.configs.pretrained import CrossModalConfig, PretrainedConfig
from anisotropy_jax.configs.depth import DepthConfig
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.configs.report import ModalitiesConfig, ReproduceConfig
from anisotropy_jax.configs.series import SeriesConfig
from anisotropy_jax.configs.sweep import SweepConfig, upgrade_recorded

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "anisotropy_jax" / "configs"
RESULTS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "results"
SERIES_DIR = "runs/series"  # SeriesConfig.series_dir is required (its default '' is refused)


def _series(c):
    return from_mapping(SeriesConfig, {**c.to_dict(), "series_dir": SERIES_DIR})


# The converter each script applies to its config (experiments/<name>.py).
CONVERTERS = {
    "sweep": sweep_configs_from_mapping,
    "series": _series,
    "cross_modal": lambda c: from_mapping(CrossModalConfig, c),
    "depth": depth_config_from_mapping,
    "embeddings": lambda c: from_mapping(EmbeddingsConfig, c),
    "extreme": lambda c: from_mapping(ExtremeConfig, c),
    "normalizations": grid_config_from_mapping,
    "pretrained": lambda c: from_mapping(PretrainedConfig, c),
    "report": reproduce_config_from_mapping,
    "train": config.train_config_from_mapping,
}


def _defaults(name):
    """What the converter must give for the file's default config: its dataclasses' defaults."""
    return {
        "sweep": lambda: [(default_label(BlockConfig()), SweepConfig())],
        "series": lambda: SeriesConfig(series_dir=SERIES_DIR),
        "cross_modal": CrossModalConfig,
        "depth": DepthConfig,
        "embeddings": EmbeddingsConfig,
        "extreme": ExtremeConfig,
        "normalizations": NormalizationGridConfig,
        "pretrained": PretrainedConfig,
        "train": lambda: (config.default_train_config("clm"), AnalysisConfig()),
    }[name]()


def _module(name):
    """The config file, loaded by path as ml_collections loads it."""
    spec = importlib.util.spec_from_file_location(f"config_{name}", CONFIGS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def _variants():
    cases = []
    for name in sorted(CONVERTERS):
        variants = _module(name).VARIANTS
        cases += [(name, None)] + [(name, v) for v in variants]
        cases += [(name, f"{v}+smoke") for v in variants if v != "smoke"]  # X at smoke size
    return cases


def test_every_config_file_is_checked_here():
    assert sorted(p.stem for p in CONFIGS.glob("[!_]*.py")) == sorted(CONVERTERS)


@pytest.mark.parametrize("name, variant", _variants())
def test_every_variant_builds_and_converts(name, variant):
    CONVERTERS[name](_module(name).get_config(variant))


@pytest.mark.parametrize("name", sorted(set(CONVERTERS) - {"report"}))
def test_the_default_config_is_the_dataclass_defaults(name):
    assert CONVERTERS[name](_module(name).get_config(None)) == _defaults(name)


def test_reproduce_starts_from_its_dataclass_defaults():
    """The report's default variant is CPU-sized; `:full` keeps the defaults of every field it
    does not take from another config file's variant."""
    full = CONVERTERS["report"](_module("report").get_config("full"))
    default = {f.name: f.default for f in dataclasses.fields(ReproduceConfig)}  # no sweeps: refused
    for field in ("studies", "seeds", "pretrained_models", "pretrained", "modalities"):
        assert getattr(full, field) == default[field], field
    assert full.depth == dataclasses.replace(default["depth"], num_seeds=5)  # ≥ 5 seeds per claim
    kinds = ["biased", "norm_matched", "fixed_norm", "per_sequence"]
    assert [label for label, _ in full.sweeps] == (
        [f"inputs={k}" for k in kinds] + [f"pre-LN: inputs={k}" for k in kinds])
    assert full.size == "full"
    small = config.train_config_from_mapping(config.train_config_dict("small", "mlm"))[0]
    assert full.training[1][0] == small and not full.training[1][1].run


def test_bias_sweep_defaults_are_the_design_contract():
    """The bias-sweep config fields of the design contract (docs/SWEEP.md): the main job's
    defaults. They come from BlockConfig and SweepConfig; changing one changes the main job's results."""
    c = _module("sweep").get_config(None)
    contract = {
        "d_model": 768, "num_heads": 12, "d_ff": 3072, "norm_position": "post", "init": "bert",
        "init_std": 0.02, "layer_norm_eps": 1e-12, "attention": "softmax",
        "logit_temperature": 1.0, "causal": False, "use_mlp": True, "use_bias": True,
        "attention_impl": "xla", "precision": "highest"}
    assert {name: c.model[name] for name in contract} == contract
    assert (c.batch_size, c.seq_len, c.num_seeds, c.seed) == (16, 128, 3, 0)
    assert c.bias_norms == DEFAULT_BIAS_NORMS and len(c.bias_norms) == 30


@pytest.mark.parametrize("name, cls", [("sweep", SweepConfig), ("depth", DepthConfig)])
def test_the_command_line_path_is_the_dataclass_path(name, cls):
    """The form the command line edits is the dataclass's: every block field under `model`
    (`--config.model.precision`), nothing hoisted; the sweep adds `compare_fields` (dataclass
    paths) and `compare_values`."""
    form = _module(name).get_config(None).to_dict()
    extra = {"compare_fields": (), "compare_values": ()} if name == "sweep" else {}
    assert form == {**config_dict(cls).to_dict(), **extra}
    assert "precision" not in form and "precision" in form["model"]


def test_recorded_configs_of_the_older_forms_are_read():
    """Committed results.json files recorded the older forms: the experiment form with `model`
    lacking `precision`, a top-level `precision` and `compare_field` names joined by ',', and
    the dataclasses with their block under `block`. Both read back as the sweeps they ran."""
    # (read_results: the older name of the per-query-bias sigmoid, 'sigmoid', as it is now)
    doc = results.read_results(RESULTS / "sweep" / "normalizations" / "results.json")
    old = doc["config"]
    assert "precision" in old and "precision" not in old["model"] and "," in old["compare_field"]
    runs = sweep_configs_from_mapping(old)
    assert [label for label, _ in runs] == list(doc["runs"])  # the labels the results use
    current = _module("sweep").get_config("normalizations")
    current.bias_norms = tuple(old["bias_norms"])
    assert runs == sweep_configs_from_mapping(current)
    for label, cfg in runs:
        recorded = doc["runs"][label]["sweep_config"]
        assert "block" in recorded
        assert from_mapping(SweepConfig, upgrade_recorded(recorded)) == cfg
    upgraded = upgrade_recorded(old)
    assert upgraded["compare_fields"] == ("model.attention_normalization",
                                          "model.attention_output_gate", "inputs")
    assert upgraded["model"]["precision"] == "highest" and "precision" not in upgraded
    depth_doc = json.loads((RESULTS / "depth" / "cpu" / "results.json").read_text())
    assert "precision" in depth_doc["config"] and "block" in depth_doc["depth_config"]
    cfg = depth_config_from_mapping(depth_doc["config"])
    assert cfg == from_mapping(DepthConfig, upgrade_recorded(depth_doc["depth_config"]))
    assert cfg == depth_config_from_mapping(
        {**_module("depth").get_config("cpu").to_dict(), "weights": cfg.weights})
    assert upgrade_recorded(_module("sweep").get_config("control")) == \
        _module("sweep").get_config("control").to_dict()  # the current form as it is


def test_train_defaults_differ_by_objective_only_where_the_family_does():
    clm, mlm = (config.train_config_dict(None, o) for o in ("clm", "mlm"))
    assert (clm.model.layer_norm_eps, mlm.model.layer_norm_eps) == (1e-5, 1e-12)
    clm.objective, clm.model.layer_norm_eps = "mlm", 1e-12
    assert clm.to_dict() == mlm.to_dict()
    with pytest.raises(ValueError, match="unknown variant 'large'"):
        config.train_config_dict("large", "clm")


@pytest.mark.parametrize("cls", [DataConfig, ModelSpec, OptimConfig, AnalysisConfig, TrainConfig,
                                 PretrainedConfig, CrossModalConfig, EmbeddingsConfig,
                                 ModalitiesConfig])
def test_config_dict_round_trips(cls):
    assert config_dict(cls).to_dict() == config_dict(cls()).to_dict()
    assert from_mapping(cls, config_dict(cls)) == cls()


def test_text_sample_fields_are_shared_and_keep_their_order():
    """PretrainedConfig and SeriesConfig take the sentence-sample fields from one TextSample base;
    their fields keep the order config.json and results.json are written in, and each class its
    own num_sentences default."""
    sample = ("num_sentences", "min_words", "max_words", "max_length", "batch_size",
              "length_multiple", "num_pairs", "seed", "include_special_tokens")
    assert field_names(PretrainedConfig) == (
        "model_dir", "text_file", "inputs", "num_inputs", *sample, "untrained_baseline",
        "untrained_seeds",
        "save_hidden_states", "precision")
    assert field_names(SeriesConfig) == ("series_dir", "text_file", *sample, "head_analysis",
                                         "head_batch_size", "head_length", "precision")
    assert (PretrainedConfig().num_sentences, config_dict(SeriesConfig).num_sentences) == (1000, 256)
    assert list(dataclasses.asdict(PretrainedConfig())) == list(field_names(PretrainedConfig))


def test_config_dict_nests_keeps_tuples_and_reads_required_fields_without_constructing():
    c = config_dict(TrainConfig(optim=OptimConfig(warmup_steps=7)), ("optim", "steps"))
    assert sorted(c.keys()) == ["optim", "steps"] and c.optim.warmup_steps == 7
    assert isinstance(config_dict(EmbeddingsConfig).widths, tuple)
    assert config_dict(SeriesConfig).series_dir == ""  # SeriesConfig() itself refuses ''
    with pytest.raises(KeyError, match="not fields of"):
        config_dict(SeriesConfig, ("series_dir", "no_such_field"))


def test_one_precision_vocabulary_with_aliases():
    """'highest' | 'default' | 'bfloat16' everywhere; 'tf32' (the benchmark's old word) and the
    other aliases are accepted and stored under the name they stand for."""
    assert config.PRECISIONS == ("highest", "default", "bfloat16")
    for alias, name in config.PRECISION_ALIASES.items():
        assert name in config.PRECISIONS
        assert BlockConfig(precision=alias).precision == name
        assert ModelSpec(precision=alias).precision == name
        assert EmbeddingsConfig(precision=alias).precision == name
        assert PretrainedConfig(precision=alias).precision == name
        assert SeriesConfig(series_dir=SERIES_DIR, precision=alias).precision == name
    (_, sweep), = sweep_configs_from_mapping({"model": {"precision": "tf32"}})
    assert sweep.model.precision == "default"
    assert depth_config_from_mapping({"model": {"precision": "tf32"}}).model.precision == "default"
    train, _ = config.train_config_from_mapping({"model": {"precision": "tf32"}})
    assert train.model.precision == "default"
    with pytest.raises(config.ConfigError, match=r"^model.precision: unknown precision 'fp8'"):
        BlockConfig(precision="fp8")


def test_the_training_config_names_its_objective_as_a_variant():
    train = _module("train")
    assert train.get_config("mlm+smoke").to_dict() == config.train_config_dict("smoke", "mlm").to_dict()
    assert train.get_config("smoke").to_dict() == config.train_config_dict("smoke", "clm").to_dict()
    assert train.get_config("clm").to_dict() == config.train_config_dict(None, "clm").to_dict()
    with pytest.raises(ValueError, match="'mlm' and 'clm' both set objective"):
        train.get_config("mlm+clm")
    with pytest.raises(ValueError, match="'small' and 'gpu' both set"):
        train.get_config("small+gpu")
    assert train.get_config("smoke+small").to_dict() == train.get_config("smoke").to_dict()


def test_an_unset_optional_field_can_be_set_from_the_command_line():
    """`T | None` fields left at None are typed placeholders: `--config.model.qkv_bias=False`
    sets them (ml_collections refuses to override a plain None)."""
    from absl import flags
    from ml_collections import config_flags

    def parsed(*overrides):
        argv = ["prog", f"--config={CONFIGS / 'sweep.py'}:smoke", *overrides]
        values = flags.FlagValues()
        config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
        values(argv)
        return values.config

    block = CONVERTERS["sweep"](parsed("--config.model.qkv_bias=False",
                                       "--config.model.logit_scale=0.5"))[0][1].model
    assert block.qkv_bias is False and block.logit_scale == 0.5 and block.mlp_bias is None
    with pytest.raises(flags.IllegalFlagValueError):
        parsed("--config.model.qkv_bias=maybe")
