"""Quantisation control of the extreme-token study (docs/EXTREME.md, "Quantisation control"): a
float32 checkpoint's extreme-token metrics (kurtosis, the largest |activation| and its ratio to
the median, the sink rate; natural text, the `report` variant's 16 sentences) before and after
its weights go through GGUF types Q8_0, Q5_0, Q4_1, Q4_0 and Q4_K (`models.formats.quantise`).

  python -m benchmarks.quantisation_control OUT.json [MODEL ...]   (default: mpnet minilm-l6)
"""
import sys

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.configs.extreme import ExtremeConfig
from anisotropy_jax.models import packaged
from anisotropy_jax.models.formats import quantise
from anisotropy_jax.studies.extreme import analysis, layers, summary
from anisotropy_jax.studies.pretrained import analysis as pretrained

CONFIG = ExtremeConfig(num_sentences=16, inputs=("natural",), untrained_seeds=1)
STATE_KEYS, BLOCK_KEYS = ("kurtosis", "massive_top", "massive_top_ratio"), ("sink_rate",)


def headline(per: dict) -> dict:
    """Over the states i ≥ 1: the largest kurtosis, |activation| and top/median; over the blocks:
    the largest and the mean sink rate, and the blocks whose rate exceeds 0.5."""
    states, rate = per["states"], np.array(per["attention"]["sink_rate"], float)
    return {"max_kurtosis": max(states["kurtosis"][1:]),
            "max_abs_activation": max(abs(v) for v in states["massive_top"][1:]),
            "max_top_ratio": max(states["massive_top_ratio"][1:]),
            "max_sink_rate": float(rate.max()), "mean_sink_rate": float(rate.mean()),
            "sink_blocks": int(np.sum(rate > 0.5))}


def measure(model: str) -> dict:
    loaded = pretrained.validate(analysis.pretrained_config(CONFIG, str(packaged.resolve(model))))
    m, batch = loaded.model, analysis.batches(loaded, CONFIG)["natural"]
    stats_fn = layers.layer_statistics_fn(m.family, m.config, CONFIG.top_k, CONFIG.top_dims)
    out = {"model": analysis.model_summary(m), "num_tokens": int(batch.mask_BxL.sum()), "kinds": {}}
    for kind in ("float32",) + quantise.KINDS:
        params, counts = ((m.params, None) if kind == "float32"
                          else quantise.round_trip_params(m.params, kind))
        raw = layers.to_host(stats_fn(params, batch.inputs, batch.mask_BxL, batch.control_key_B))
        per = summary.run_summary(raw, CONFIG.epsilon)
        out["kinds"][kind] = {"parameters": counts, "headline": headline(per),
                              "states": {k: per["states"][k] for k in STATE_KEYS},
                              "attention": {k: per["attention"][k] for k in BLOCK_KEYS}}
        print(model, kind, counts, out["kinds"][kind]["headline"], flush=True)
    return out


if __name__ == "__main__":
    provenance = results.Provenance(" ".join(["python -m benchmarks.quantisation_control",
                                              *sys.argv[1:]]))
    doc = {"models": {name: measure(name) for name in sys.argv[2:] or ("mpnet", "minilm-l6")}}
    doc["provenance"] = {**provenance.finish("quantisation_control"),
                         "command": provenance.command}
    results.write_json(sys.argv[1], results.to_jsonable(doc))
