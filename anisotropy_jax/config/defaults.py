"""The experiment form of a config's defaults: a config dataclass (its class defaults, or an
instance's values) as an `ml_collections.ConfigDict`, which experiment config files start from and
then change by their named variants. The defaults and their docs live in the dataclasses only
(`Attributes:` of each docstring); `from_mapping` (config/base.py) is the way back. A named
variant is data, the fields it sets; `with_variants` applies the variants a `--config=STUDY:A+B`
names, the same way for every study.
"""
from __future__ import annotations

import copy
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


# A named variant is data: the fields it sets, each by its dotted path ('model.d_model'), in
# order. `--config=STUDY:VARIANT` names one, or several joined by '+', in every study alike.
# Every study's `smoke` is its CI size: it sets every size field any other variant sets, and it
# is applied after the other names wherever it stands, so `X+smoke` (= `smoke+X`) is X's
# structure at smoke's sizes.
SMOKE = "smoke"
UNKNOWN_VARIANT = "config: unknown variant {!r}; choose from {} (several joined by '+')"
COLON_VARIANTS = ("config: {!r}: variants combine with '+', not ':'; write {!r}")


def variant_names(arg: str | None, variants: Sequence[str]) -> tuple[str, ...]:
    """The variants `arg` names (the `:VARIANT` of --config: names joined by '+', spaces around
    them ignored; None, '' and 'default' name none), in the order they apply: as written, and
    `smoke` last. ValueError (one line) for ':' between names, an unknown name (listing
    `variants`) or a name given twice."""
    text = (arg or "").strip()
    if ":" in text:
        raise ValueError(COLON_VARIANTS.format(text, "+".join(n.strip() for n in text.split(":"))))
    names = [name.strip() for name in text.split("+")]
    names = [name for name in names if name not in ("", "default")]
    for name in names:
        if name not in variants:
            raise ValueError(UNKNOWN_VARIANT.format(name, tuple(variants)))
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"config: {text!r} names {twice[0]!r} twice")
    return tuple(name for name in names if name != SMOKE) + ((SMOKE,) if SMOKE in names else ())


def _overlap(a: str, b: str) -> bool:
    """Whether setting field path `a` and field path `b` touch the same field."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _check_combination(names: Sequence[str], settings: Mapping[str, Mapping[str, Any]]) -> None:
    """Two named variants other than smoke (whose sizes apply last) that set one field to
    different values cannot both hold: a one-line ValueError names them and the field."""
    others = [name for name in names if name != SMOKE]
    for i, first in enumerate(others):
        for second in others[i + 1:]:
            for key, value in settings.get(first, {}).items():
                for other, other_value in settings.get(second, {}).items():
                    if _overlap(key, other) and (key != other or value != other_value):
                        raise ValueError(
                            f"config: {first!r} and {second!r} both set {min(key, other)}; "
                            f"name one of them")


def apply_settings(config: ml_collections.ConfigDict, fields: Mapping[str, Any]
                   ) -> ml_collections.ConfigDict:
    """`config` with `fields` set, in their order, a nested one by its dotted path; a ConfigDict
    or dict value replaces the whole sub-config (a copy of it). Returns `config`."""
    for key, value in fields.items():
        *parents, field = key.split(".")
        target = config
        for parent in parents:
            target = target[parent]
        target[field] = copy.deepcopy(value)
    return config


def with_variants(config: ml_collections.ConfigDict, arg: str | None, variants: Sequence[str],
                  settings: Mapping[str, Mapping[str, Any]]) -> ml_collections.ConfigDict:
    """`config` (an experiment form: a study's defaults) changed by the variants `arg` names
    (`variant_names`: '+' between names, smoke last) and returned: for each, the fields
    `settings[name]` sets (`apply_settings`); a name of `variants` without settings changes
    nothing. Every study's `get_config(arg)` is this. Two variants other than smoke that set
    one field differently are refused (ValueError, one line)."""
    names = variant_names(arg, variants)
    _check_combination(names, settings)
    for name in names:
        apply_settings(config, settings.get(name, {}))
    return config
