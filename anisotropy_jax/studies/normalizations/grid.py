"""Training and analysing the cells of the normalisation grid: one (dataset, normalisation) cell
is one vmapped program of its seeds (`training.train_seeds`), then each seed's checkpoints are
analysed (`dynamics.analysis.run`: one jitted pass per checkpoint) and reduced to the grid's
scalars per checkpoint, written as the run's `grid_run.json` (with dynamics.npz).

Layout: WORKDIR/<dataset>/<normalization>/seed_<s>/ holds one training run (config.json,
metrics.jsonl, eval.jsonl, checkpoints/, dynamics.npz, grid_run.json). A finished run (its
grid_run.json written for its last step) is neither trained nor analysed again; an unfinished one
resumes from its newest checkpoint.
"""
from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import data as data_lib, results
from anisotropy_jax.config import ConfigError, TrainConfig
from anisotropy_jax.configs.normalizations import NormalizationGridConfig
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies import training
from anisotropy_jax.studies.train import analysis, report

RUN_FILE = "grid_run.json"
# The grid's scalars per checkpoint and what each is (block outputs: hidden states 1 … layers;
# reductions over them of `metrics.LAYER_METRICS` of the same names).
METRICS = {
    "val_loss": "validation loss (nats per token) on the run's fixed validation batch",
    "cross_sequence_cosine": "cross-sequence average cosine of the hidden states, mean over the "
                             "block outputs",
    "centered_average_cosine": "average cosine after removing the mean vector, mean over block "
                               "outputs",
    "sink_rate": "Gu et al.'s sink rate (alpha_0 > 0.3, key 0 = first token) of the attention "
                 "weights, mean over layers and heads",
    "massive_top_ratio": "Sun et al.'s top |activation| / median |activation|, largest over the "
                     "block outputs",
    "kurtosis": "Pearson kurtosis of each sequence's activations, mean over sequences and "
                "block outputs",
    "abs_cos_qk": "|cos(mean q, mean k)|, mean over layers and heads",
    "attention_entropy_normalized": "entropy / ln(visible keys) of the attention weights the "
                                    "model used, renormalised over the visible keys, mean over "
                                    "the queries with weight, then over layers and heads",
    "attention_max": "largest renormalised weight, averaged as attention_entropy_normalized",
    "attention_query_agreement": "share of queries whose largest weight is on the most frequent "
                                 "such key, per sequence and head, averaged as the entropy",
    "attention_mass": "sum of the used weights over the visible keys (1 for softmax), mean over "
                      "queries, layers and heads",
    "attention_zero_mass_share": "share of the queries whose weights sum to zero (left out of "
                                 "the three statistics above), mean over layers and heads",
    "rankme_last": "RankMe (Garrido et al., eps 1e-7) of the last block's output, the B*L tokens "
                   "of the analysis batch as they are (not centred); numpy float64 on the host",
    "alpha_req_last": "alpha-ReQ (Agrawal et al.: eigenvalue decay of the covariance over ranks "
                      "11-100) of the same tokens",
}
# Attention statistics averaged over the heads where they are defined (a head with no query of
# positive weight has none: attention_zero_mass_share counts those queries).
_USED_ATTENTION = ("attention_entropy_normalized", "attention_max", "attention_query_agreement")


def run_dir(workdir: pathlib.Path, dataset: str, normalization: str, seed: int) -> pathlib.Path:
    return pathlib.Path(workdir) / dataset / normalization / f"seed_{seed}"


def checkpoint_series(result: analysis.DynamicsResult) -> dict[str, list[float]]:
    """{metric in METRICS: one value per analysed checkpoint} of one run."""
    heads, layers = result.heads, result.layers

    def per_step(values):  # (S, layers, H) → (S, layers · H)
        return np.asarray(values, np.float64).reshape(len(result.steps), -1)

    val = dict(zip(result.val_steps.tolist(), result.val_loss.tolist()))
    blocks = slice(1, None)  # hidden state 0 is the embedding output
    series = {
        "val_loss": np.array([val.get(int(s), np.nan) for s in result.steps]),
        "cross_sequence_cosine": layers["cross_sequence_cosine"][:, blocks].mean(-1),
        "centered_average_cosine": layers["centered_average_cosine"][:, blocks].mean(-1),
        "sink_rate": heads["sink_rate"].reshape(len(result.steps), -1).mean(-1),
        "massive_top_ratio": layers["massive_top_ratio"][:, blocks].max(-1),
        "kurtosis": layers["kurtosis"][:, blocks].mean(-1),
        "abs_cos_qk": np.abs(heads["mean_query_key_cosine"]).reshape(len(result.steps),
                                                                      -1).mean(-1),
        "attention_mass": per_step(heads["attention_mass"]).mean(-1),
        "attention_zero_mass_share": per_step(heads["attention_zero_mass_share"]).mean(-1),
        "rankme_last": result.last_block["rankme"],
        "alpha_req_last": result.last_block["alpha_req"],
    }
    series.update({name: _mean_where_defined(per_step(heads[name])) for name in _USED_ATTENTION})
    return {name: [float(v) for v in values] for name, values in series.items()}


def _mean_where_defined(values_SxN: np.ndarray) -> np.ndarray:
    """Mean over the heads (axis 1) whose value is defined (finite); NaN where none is."""
    defined = np.isfinite(values_SxN)
    total = np.where(defined, values_SxN, 0.0).sum(-1)
    count = defined.sum(-1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def loss_floor(config: TrainConfig) -> float | None:
    """The loss floor of the run's validation batch (bigram_backcopy), None for text."""
    stream = data_lib.BatchIterator(config.data)
    return stream.loss_floor(stream.validation_batch(config.eval_batch_size))


def read_run(path: pathlib.Path, steps: int) -> dict[str, Any] | None:
    """A finished run's grid_run.json (its last analysed step is `steps`, every metric of
    METRICS there), or None: then the run is resumed (a finished one trains no further) and
    analysed again."""
    file = path / RUN_FILE
    if not file.is_file():
        return None
    doc = results.read_results(file)  # an older run's: its names as they are called now
    finished = doc.get("steps") and doc["steps"][-1] == steps
    return doc if finished and set(METRICS) <= set(doc.get("series", {})) else None


def check_workdir(grid: NormalizationGridConfig, workdir: pathlib.Path) -> None:
    """Refuses a workdir whose run of a cell holds another normalisation (one an older version
    called by this name: its grid_run.json says which, under today's name)."""
    for dataset in grid.datasets:
        for norm in grid.normalizations:
            for seed in grid.seeds:
                file = run_dir(workdir, dataset, norm, seed) / RUN_FILE
                if not file.is_file():
                    continue
                saved = results.read_results(file).get("normalization")
                if saved != norm:
                    raise ConfigError(f"workdir: {file} is a run of attention normalization "
                                      f"{saved!r}, not {norm!r}; use another --workdir")


def analyse_run(config: TrainConfig, path: pathlib.Path, grid: NormalizationGridConfig,
                progress: Progress) -> dict[str, Any]:
    """Analyses every checkpoint of one trained run; writes dynamics.npz and, last,
    grid_run.json; returns the latter."""
    result = analysis.run(path, grid.analysis, progress=progress)
    results.write_npz(path / "dynamics.npz", report.flatten_arrays(result))
    doc = {"provenance": {"schema_version": results.RESULTS_SCHEMA_VERSION,
                          "study": "normalizations"},
           "dataset": config.data.source,
           "normalization": config.model.attention_normalization, "seed": config.seed,
           "steps": [int(s) for s in result.steps], "loss_floor": loss_floor(config),
           "final_train_loss": float(result.loss[-1]) if result.loss.size else None,
           "series": checkpoint_series(result)}
    results.write_json(path / RUN_FILE, doc)
    return doc


def run_cell(grid: NormalizationGridConfig, workdir: pathlib.Path, dataset: str,
             normalization: str, progress: Progress) -> list[dict[str, Any]]:
    """Trains the seeds of one cell as one program (the finished ones are left alone), analyses
    each; returns the seeds' grid_run.json documents in seed order."""
    configs = [grid.train_config(dataset, normalization, s) for s in grid.seeds]
    paths = [run_dir(workdir, dataset, normalization, s) for s in grid.seeds]
    done = [read_run(p, c.steps) for c, p in zip(configs, paths)]
    todo = [i for i, d in enumerate(done) if d is None]
    if todo:
        training.train_seeds([configs[i] for i in todo], [paths[i] for i in todo],
                             progress=progress, analyses=[grid.analysis] * len(todo))
    for i in todo:
        done[i] = analyse_run(configs[i], paths[i], grid, progress)
    return done
