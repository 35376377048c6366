"""The experiment form of a config's defaults: a config dataclass (its class defaults, or an
instance's values) as an `ml_collections.ConfigDict`, which experiment config files start from and
then change by their named variants. The defaults and their docs live in the dataclasses only
(`Attributes:` of each docstring); `from_mapping` (config/base.py) is the way back. A named
variant is data, the fields it sets (`with_variants`).
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, Sequence

import ml_collections


def field_names(config: Any) -> tuple[str, ...]:
    """The init fields of a config dataclass (class or instance), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(config) if f.init)


def _default(cls: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f"{cls.__name__}.{name} has no default")


def _optional(hint: Any) -> type | None:
    """T of a `T | None` hint with one plain type T (bool, int, float, str), else None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if type(None) in typing.get_args(hint) and len(args) == 1 and args[0] in (bool, int, float, str):
        return args[0]
    return None


def config_dict(config: Any, fields: Sequence[str] | None = None) -> ml_collections.ConfigDict:
    """A ConfigDict of `fields` (default: every init field) of a config dataclass.

    A class gives its defaults, read from its fields without constructing it (so a class with a
    required field, SeriesConfig.series_dir = '', works too); an instance gives its values.
    A value that is itself a config dataclass becomes a nested ConfigDict of all its fields;
    tuples stay tuples (ml_collections then parses `--config.X='(1, 2)'` as a tuple).
    """
    names = field_names(config) if fields is None else tuple(fields)
    known = field_names(config)
    hints = typing.get_type_hints(config if isinstance(config, type) else type(config))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise KeyError(f"{unknown} are not fields of {getattr(config, '__name__', config)}")
    out = ml_collections.ConfigDict()
    for name in names:
        value = _default(config, name) if isinstance(config, type) else getattr(config, name)
        if value is None and _optional(hints.get(name)) is not None:
            # `T | None` unset: a typed placeholder, so that `--config.FIELD=VALUE` can set it
            value = ml_collections.config_dict.placeholder(_optional(hints[name]))
        out[name] = config_dict(value) if dataclasses.is_dataclass(value) else value
    return out


# The error of an unknown variant (formatted with its name and the config's variants).
UNKNOWN_VARIANT = "config variant: unknown variant {!r}; choose one of {}"
UNKNOWN_COMBINED_VARIANT = "config: unknown variant {!r}; choose from {}"


def with_variants(config: ml_collections.ConfigDict, arg: str | None, variants: Sequence[str],
                  settings: Mapping[str, Mapping[str, Any]], *, combine: bool = False,
                  error: str | None = None) -> ml_collections.ConfigDict:
    """`config` (an experiment form) changed by the named variant `arg` (the `:VARIANT` of
    --config) and returned: the fields `settings[name]` sets, in their order, a nested one by
    its dotted path ('model.d_model'). None, '' and 'default' change nothing, nor does a name of
    `variants` without settings. With `combine`, `arg` is names joined by '+' (spaces around
    them ignored), applied left to right. A name not in `variants` raises ValueError(`error`
    formatted with it and `variants`; default: UNKNOWN_COMBINED_VARIANT with `combine`, else
    UNKNOWN_VARIANT)."""
    error = error or (UNKNOWN_COMBINED_VARIANT if combine else UNKNOWN_VARIANT)
    for name in [n.strip() for n in (arg or "").split("+")] if combine else [arg or "default"]:
        if name not in ("", "default", *variants):
            raise ValueError(error.format(name, tuple(variants)))
        for key, value in settings.get(name, {}).items():
            *parents, field = key.split(".")
            target = config
            for parent in parents:
                target = target[parent]
            target[field] = value
    return config
