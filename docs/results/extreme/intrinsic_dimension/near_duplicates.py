"""Are the smallest-scale neighbours of untrained hidden states twins, the same token at the same
position (the exact duplicates of the embedding output, which TwoNN leaves out there)?

  .venv/bin/python docs/results/extreme/intrinsic_dimension/near_duplicates.py RUN_DIR \
      > docs/results/extreme/intrinsic_dimension/near_duplicates.json

Per hidden state, for all-MiniLM-L6-v2 (the pretrained study's tokens: 200 Shakespeare
sentences, seed 0, max_length 64; trained and untrained seed 0) and for seed 0 of the `:small`
causal byte model at steps 0 and 300 (RUN_DIR = its training workdir, e.g.
runs/id_training/clm_small/seed_0; the analysis batch): N tokens, the share whose nearest
neighbour is an exact duplicate (r1 = 0), the share whose nearest other token at r1 > 0 is a
twin, the median of μ = r2/r1 over the points TwoNN counts (r1 > 0), and TwoNN of those points
without the twins' ratios (μ of the points whose nearest neighbour is not a twin). Float64 numpy,
all pairwise distances (N ≤ 4887) to rank, the two nearest recomputed from the differences.
"""
import json
import sys

import jax
import numpy as np

from anisotropy_jax import checkpointing, data as data_lib
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies import training
from anisotropy_jax.studies.train import analysis as dynamics
from anisotropy_jax.studies.pretrained import analysis as pretrained


def twonn(log_mu: np.ndarray, fraction: float = 0.9) -> float:
    logs = np.sort(log_mu)
    n, kept = len(logs), int(np.floor(len(logs) * fraction))
    ys = -np.log(1.0 - np.arange(1, kept + 1) / n)
    return float(logs[:kept] @ ys / (logs[:kept] @ logs[:kept]))


def twins(x: np.ndarray, token: np.ndarray, position: np.ndarray) -> dict:
    x = np.asarray(x, np.float64)
    sq = np.sum(x * x, 1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    np.fill_diagonal(d2, np.inf)
    order = np.argsort(d2, axis=1)[:, :2]
    # the two distances again from the differences (exact 0 for duplicates, no cancellation)
    r = np.sort(np.linalg.norm(x[:, None, :] - x[order], axis=-1), axis=1)
    exact = r[:, 0] == 0
    twin = (token[order[:, 0]] == token) & (position[order[:, 0]] == position)
    ok = ~exact
    log_mu = np.log(r[ok, 1] / r[ok, 0])
    return {"n": int(len(x)), "exact_duplicate_share": float(exact.mean()),
            "twin_nearest_share": float((twin & ok).sum() / ok.sum()),
            "median_mu": float(np.exp(np.median(log_mu))),
            "median_mu_twins": float(np.exp(np.median(log_mu[twin[ok]]))) if (twin & ok).any()
            else None,
            "twonn_counted": twonn(log_mu), "twonn_without_twins": twonn(log_mu[~twin[ok]])}


def minilm() -> dict:
    config = PretrainedConfig(num_sentences=200, max_length=64, length_multiple=32,
                              untrained_seeds=1, num_pairs=10)
    result = pretrained.run(config)
    out = {}
    for run, states in result.hidden_states.items():
        out[run] = [twins(x, states.token_ids, states.position[0]) for x in states.layers]
    return out


def byte_model(workdir: str) -> dict:
    config = dynamics.load_run_config(workdir)
    tokens = dynamics.analysis_tokens(data_lib.BatchIterator(config.data), 16, 0)
    model = Transformer(config.transformer_config(), with_head=False)
    token = tokens.reshape(-1)
    position = np.tile(np.arange(tokens.shape[1]), tokens.shape[0])
    out = {}
    with checkpointing.manager(f"{workdir}/checkpoints", read_only=True) as mngr:
        abstract = training.abstract_state(config)[0]
        for step, state in checkpointing.iterate_readable(mngr, abstract, [0, 300]):
            _, probes = model.apply(state["params"], tokens)
            hidden = [probes["embeddings"]] + [p["resid_post"] for p in probes["blocks"]]
            out[f"step_{step}"] = [twins(np.asarray(jax.device_get(h)).reshape(len(token), -1),
                                         token, position) for h in hidden]
    return out


if __name__ == "__main__":
    json.dump({"all-MiniLM-L6-v2": minilm(), "clm_small_seed_0": byte_model(sys.argv[1])},
              sys.stdout, indent=1)
    print()
