"""Validation primitives and the one mapping → dataclass converter of every typed config.

ml_collections ConfigDicts (experiment files, `--config.X=...` flags) exist only at the edge; they
are converted once, recursively, into frozen dataclasses whose `__post_init__` validates each field
and raises a one-line `ConfigError` naming it, before anything is compiled.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Mapping


class ConfigError(ValueError):
    """A configuration field (or flag, file, model directory) is invalid. The message names the
    field, on one line; scripts print it and exit with status 2."""


def require(condition: bool, field: str, message: str) -> None:
    """Raises ConfigError("field: message") unless `condition`."""
    if not condition:
        raise ConfigError(f"{field}: {message}")


def require_int(value: Any, field: str, minimum: int) -> None:
    """An int (not a bool) ≥ minimum."""
    require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum, field,
            f"must be an integer >= {minimum}, got {value!r}")


def require_bool(value: Any, field: str) -> None:
    require(isinstance(value, bool), field, f"must be True or False, got {value!r}")


def require_positive_float(value: Any, field: str) -> None:
    """A finite number > 0."""
    require(isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0, field,
            f"must be finite and > 0, got {value!r}")


def require_choice(value: Any, field: str, choices: tuple[str, ...], what: str) -> None:
    require(value in choices, field, f"unknown {what} {value!r}; choose one of {choices}")


def _plain(mapping: Any) -> dict[str, Any]:
    if hasattr(mapping, "to_dict"):  # ml_collections.ConfigDict
        mapping = mapping.to_dict()
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"expected a mapping of fields, got {type(mapping).__name__}")
    return dict(mapping)


def from_mapping(cls: type, mapping: Any, prefix: str = "", **fixed: Any) -> Any:
    """A validated `cls` (a frozen dataclass) from a (nested) mapping.

    Unknown keys are an error naming the key (a typo in `--config.model.X` is never ignored).
    Fields whose type is itself a config dataclass are converted recursively, with their
    prefix in error messages ("model.d_model: ..."). Lists become tuples where the field is a
    tuple. `fixed` fields are passed as they are and cannot come from the mapping.
    """
    fields = _plain(mapping)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.init} - set(fixed)
    kwargs: dict[str, Any] = dict(fixed)
    for key, value in fields.items():
        require(key in known, f"{prefix}{key}", f"unknown field; known fields are {sorted(known)}")
        hint = hints.get(key)
        if dataclasses.is_dataclass(hint) and not isinstance(value, hint):
            value = from_mapping(hint, value, f"{prefix}{key}.")
        elif typing.get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return cls(**kwargs)
