"""The trained model's norm position (`model.norm_position`): 'auto' keeps each objective's
(clm pre-LN with a final LayerNorm, mlm post-LN), 'pre'/'post' swap it, with a final LayerNorm only
after pre-LN blocks; a bad value is one line; a swapped run is refused by the BERT/GPT-2 export."""
import dataclasses

import jax
import numpy as np
import pytest

from anisotropy_jax import configs
from anisotropy_jax.config import ConfigError, train_config_from_mapping
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies.series import export


def _config(objective, **model):
    c = configs.module("train").get_config(f"{objective}+smoke")
    for key, value in model.items():
        c.model[key] = value
    return train_config_from_mapping(c)[0]


@pytest.mark.parametrize("objective,position,final", [("clm", "pre", True),
                                                      ("mlm", "post", False)])
def test_auto_is_the_objectives_position(objective, position, final):
    auto = _config(objective).transformer_config()
    assert auto.block.norm_position == position and auto.final_norm is final
    assert _config(objective, norm_position=position).transformer_config() == auto


def test_a_post_ln_clm_has_no_final_norm_and_runs():
    config = _config("clm", norm_position="post", num_layers=1, d_model=16, num_heads=2,
                     d_ff=32)
    tcfg = config.transformer_config()
    assert tcfg.block.norm_position == "post" and not tcfg.final_norm and tcfg.block.causal
    tokens = np.zeros((1, 8), np.int32)
    params = Transformer(tcfg).init(jax.random.key(0), tokens)
    assert "final_norm" not in str(jax.tree_util.tree_structure(params))
    logits, _ = Transformer(tcfg).apply(params, tokens)
    assert np.isfinite(np.asarray(logits)).all()


def test_a_bad_position_is_one_line_and_a_swapped_run_does_not_export():
    with pytest.raises(ConfigError, match="model.norm_position") as e:
        _config("clm", norm_position="middle")
    assert "\n" not in str(e.value)
    config = _config("clm", norm_position="post")
    with pytest.raises(ConfigError, match="model.norm_position.*GPT-2"):
        export.require_exportable(config)
    export.require_exportable(dataclasses.replace(config, model=dataclasses.replace(
        config.model, norm_position="auto")))
