"""`run(config) -> EmbeddingsResult`: tokenizer, then one model per (width, seed), measured at
every checkpoint step. Numpy results, no file writes (report.write writes them). The study
protocol (`anisotropy_jax.protocol`; experiments/embeddings.py): `validate`,
`run_study`, `write`, `format_study`."""
from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Mapping

import jax
import numpy as np

from anisotropy_jax import results
from anisotropy_jax.config import from_mapping
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies.embeddings import report, tokens
from anisotropy_jax.studies.embeddings.report import EmbeddingsResult
from anisotropy_jax.studies.embeddings.train import Checkpoint, train_and_measure




def _data_summary(config: EmbeddingsConfig, data: tokens.TokenData) -> dict[str, int]:
    counts = tokens.token_counts(data.train_ids, config.vocab_size)
    return {"train_tokens": int(len(data.train_ids)), "val_tokens": int(len(data.val_ids)),
            "train_chars": data.train_chars, "val_chars": data.val_chars,
            "unused_ids": int(np.sum(counts == 0))}


def checkpoint_line(p: Checkpoint) -> str:
    """A measured checkpoint: its losses and the output embedding's isotropy."""
    train = "-" if p.train_loss is None else f"{p.train_loss:.3f}"
    iso = p.isotropy
    return (f"D={p.width} seed={p.seed} step {p.step}: train {train}, val {p.val_loss:.3f}; "
            f"I(out raw) one-sign {iso['output_raw_one_sign']:.3g} sign-free "
            f"{iso['output_raw_sign_free']:.3g}; {p.seconds:.1f} s")


def run(config: EmbeddingsConfig, progress: Progress = SILENT,
        text: str | None = None) -> EmbeddingsResult:
    """Trains the tokenizer on the training split of `text` (default: the Shakespeare corpus),
    then every (width, seed) model, measuring at config.measured_steps (a line each:
    `checkpoint_line`). ConfigError for a vocabulary the text cannot reach; FloatingPointError
    for a non-finite loss or metric."""
    start = time.perf_counter()
    data = tokens.prepare(config, text)
    val_batches = tokens.validation_batches(config, data.val_ids)
    def measured(p: Checkpoint) -> None:
        progress.say(checkpoint_line(p))

    traces = {(w, s): train_and_measure(config, w, s, data, val_batches, measured)
              for w in config.widths for s in config.seeds}
    grid = [[traces[(w, s)] for s in config.seeds] for w in config.widths]

    def stacked(get) -> np.ndarray:
        return np.stack([np.stack([get(t) for t in row]) for row in grid])

    first = [row[0] for row in grid]
    return EmbeddingsResult(
        config=config, steps=np.asarray(config.measured_steps),
        isotropy={k: stacked(lambda t, k=k: t.isotropy[k]) for k in grid[0][0].isotropy},
        stats={k: stacked(lambda t, k=k: t.stats[k]) for k in grid[0][0].stats},
        val_loss=stacked(lambda t: t.val_loss), train_loss=stacked(lambda t: t.train_loss),
        projections={k: np.stack([t.projections[k] for t in first]) for k in first[0].projections},
        num_params=np.asarray([row[0].num_params for row in grid]),
        run_seconds=stacked(lambda t: np.asarray(t.seconds)),
        last_block={k: stacked(lambda t, k=k: t.last_block[k]) for k in grid[0][0].last_block},
        token_counts=tokens.token_counts(data.train_ids, config.vocab_size),
        tokenizer_json=data.tokenizer_json, data=_data_summary(config, data),
        seconds=time.perf_counter() - start)


def devices() -> str:
    """The device the models run on (for the progress header)."""
    return f"{jax.device_count()} {jax.devices()[0].platform} device(s)"


# --------------------------------------------------------------------------------------------
# The study protocol

@dataclasses.dataclass(frozen=True)
class Plan:
    embeddings: EmbeddingsConfig
    config: Any  # as given (results.json "config")
    workdir: pathlib.Path


def validate(config: Any, workdir: pathlib.Path) -> Plan:
    return Plan(from_mapping(EmbeddingsConfig, config), config, pathlib.Path(workdir))


@dataclasses.dataclass(frozen=True)
class Job:
    result: EmbeddingsResult
    config: Any


def run_study(plan: Plan, progress: Progress) -> Job:
    cfg = plan.embeddings
    progress.say(f"embedding isotropy: vocabulary {cfg.vocab_size}, widths {list(cfg.widths)}, "
                 f"{cfg.num_layers} layers, {cfg.steps} steps, seeds {list(cfg.seeds)}, measured "
                 f"at {list(cfg.measured_steps)}, on {devices()}; workdir {plan.workdir}")
    return Job(run(cfg, progress.within("embeddings")), plan.config)


def write(job: Job, workdir: pathlib.Path, provenance: results.Provenance) -> dict:
    return report.write(job.result, workdir, provenance, job.config)


def format_study(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{report.format_report(doc)}\n\nwrote {workdir}/results.json, results.npz, "
            f"tokenizer.json, figures/ in {doc['seconds']:.1f} s")
