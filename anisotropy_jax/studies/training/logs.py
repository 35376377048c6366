"""The records of a training run in its workdir, besides the checkpoints:

  config.json    {"train": the TrainConfig as saved, "analysis": the AnalysisConfig}
  metrics.jsonl  one record per step: step, loss, learning_rate, grad_norm, tokens_per_s
  eval.jsonl     one record per checkpoint: step, val_loss

A JSONL line cut by a kill ends the readable part of its file; a resumed run truncates each file
(atomically) to the records before the step it restarts from, so the files end up as an
uninterrupted run's.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from anisotropy_jax import results
from anisotropy_jax.protocol import config_difference
from anisotropy_jax.config import (AnalysisConfig, ConfigError, TrainConfig,
                                   train_config_from_mapping)

CONFIG_FILE, METRICS_FILE, EVAL_FILE = "config.json", "metrics.jsonl", "eval.jsonl"


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The complete records of a JSONL file ([] when it does not exist)."""
    path = pathlib.Path(path)
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything after it is dropped
    return records


def truncate_jsonl(path: pathlib.Path, before_step: int) -> None:
    """Keeps the complete records with step < before_step (atomically): a resumed run recomputes
    the rest, so the file ends up as an uninterrupted run's."""
    kept = [r for r in read_jsonl(path) if r.get("step", -1) < before_step]
    with results.atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))


def append_jsonl(file, record: dict[str, Any]) -> None:
    """One record as one line, flushed (a kill loses at most the line being written)."""
    file.write(json.dumps(record) + "\n")
    file.flush()


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The per-step records of metrics.jsonl."""
    return read_jsonl(pathlib.Path(workdir) / METRICS_FILE)


def read_evals(workdir: str | os.PathLike) -> list[dict]:
    """The per-checkpoint validation records of eval.jsonl."""
    return read_jsonl(pathlib.Path(workdir) / EVAL_FILE)


def current_form(saved: Any) -> Any:
    """A saved TrainConfig (config.json's "train", a report's stamp) as JSON in the current form:
    a field it lacks (added to the config since) at its default; as saved where it no longer
    validates (a field since removed, or a value now refused), to be compared as it is."""
    try:
        return results.to_jsonable(dataclasses.asdict(train_config_from_mapping(saved)[0]))
    except ConfigError:
        return saved


def check_same_config(workdir: pathlib.Path, config: TrainConfig) -> None:
    """Refuses to resume a run whose saved training config differs (names the first field). A
    field the saved config lacks (added to the config since) counts as its default."""
    path = workdir / CONFIG_FILE
    if not path.exists():
        return
    saved = current_form(json.loads(path.read_text()).get("train", {}))
    diff = config_difference(saved, results.to_jsonable(dataclasses.asdict(config)))
    if diff:
        field, old, new = diff
        raise ConfigError(f"{field}: the workdir {workdir} holds a run with {field}={old!r}; "
                          f"this command asks for {new!r} (use another --workdir)")


def write_config(workdir: pathlib.Path, config: TrainConfig,
                 analysis: AnalysisConfig | None) -> None:
    """config.json: the training config and, when given, the analysis settings."""
    record: dict[str, Any] = {"train": dataclasses.asdict(config)}
    if analysis is not None:
        record["analysis"] = dataclasses.asdict(analysis)
    results.write_json(workdir / CONFIG_FILE, record)


def read_train_config(workdir: str | os.PathLike) -> TrainConfig:
    """The TrainConfig saved in a training run's config.json."""
    path = pathlib.Path(workdir) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"--workdir: {path} does not exist; is it a training run "
                                f"(experiments/train.py)?")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"--workdir: {path} is unreadable ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get("train"), dict):
        raise ConfigError(f"--workdir: {path} holds no training config; is it a training run "
                          "(anisotropy-jax train)?")
    return train_config_from_mapping(record["train"])[0]
