import sys, numpy as np
from anisotropy_jax.configs.sweep import get_config
from anisotropy_jax.configs.sweep import sweep_configs_from_mapping
from anisotropy_jax.studies.sweep import grid
out = {}
for variant in ("smoke", "smoke+pre_ln", "smoke+control"):
    for label, cfg in sweep_configs_from_mapping(get_config(variant)):
        r = grid.run(cfg)
        for k, v in r.per_seed.items(): out[f"{variant}|{label}|{k}"] = v
        for k, v in r.per_head.items(): out[f"{variant}|{label}|h|{k}"] = v
np.savez(sys.argv[1], **out)
