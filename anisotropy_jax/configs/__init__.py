"""Each study's settings, one file per study named as the study and its command
(`anisotropy_jax/configs/<study>.py`, inside the package so that an installed `anisotropy-jax`
finds them from any folder): the settings dataclass with its validation and field docs, its named
variants (`SETTINGS`, `VARIANTS`), `get_config(variant)` → an ml_collections ConfigDict (the
dataclass's defaults, then the variant), `FIELD_DOCS` (where each field's meaning is written:
anisotropy_jax/config/docs.py) and a docstring with the command and every variant. What several
studies share (the block, the transformer, training) lives in anisotropy_jax/config.

`--config` takes a study's name (`NAME[:VARIANT]`, e.g. `sweep:control`), a config file
(`PATH[:VARIANT]`), or `:VARIANT` for the command's own config (`resolve`). VARIANT is one name or
several joined by '+' (`sweep:control+smoke`), the same in every study
(config/defaults.py `with_variants`).
"""
from __future__ import annotations

import importlib
import pathlib
import re
import textwrap
from types import ModuleType

from anisotropy_jax.config.docs import field_table

FOLDER = pathlib.Path(__file__).resolve().parent


def names() -> tuple[str, ...]:
    """The named configs: one per study, by the file's name."""
    return tuple(sorted(p.stem for p in FOLDER.glob("*.py") if not p.stem.startswith("_")))


def path(name: str) -> pathlib.Path:
    """The file of a named config (KeyError if there is none)."""
    if name not in names():
        raise KeyError(name)
    return FOLDER / f"{name}.py"


def module(name: str) -> ModuleType:
    """The module of a named config (KeyError if there is none)."""
    return importlib.import_module(f"anisotropy_jax.configs.{path(name).stem}")


def known() -> str:
    """The names --config accepts, for error messages and --help."""
    return ", ".join(names())


def resolve(spec: str, own: str | None = None) -> str:
    """The `--config` value as ml_collections reads it: 'PATH[:VARIANT]'. An existing file stays
    as it is; otherwise 'NAME[:VARIANT]' names a config of this package, and ':VARIANT' the
    command's own config `own` (a path). Raises KeyError naming what is not found."""
    file, sep, variant = spec.partition(":")
    if not file and own is not None:
        return own.partition(":")[0] + sep + variant
    if pathlib.Path(file).expanduser().is_file():
        return spec
    return f"{path(file)}{sep}{variant}"


def variants(config: ModuleType) -> list[tuple[str, str]]:
    """[(variant, description)] from the module's VARIANTS and the indented `name  text` lines
    of its docstring (continuation lines indented further)."""
    lines = (config.__doc__ or "").splitlines()
    out = []
    for name in ("default",) + tuple(v for v in config.VARIANTS if v != "default"):
        text = ""
        for i, line in enumerate(lines):
            match = re.match(rf"^(\s+):?{re.escape(name)}\s{{2,}}(\S.*)$", line)
            if match:
                text = match.group(2)
                column = len(line) - len(match.group(2))
                for more in lines[i + 1:]:
                    if len(more) - len(more.lstrip()) < column or not more.strip():
                        break
                    text += " " + more.strip()
                break
        if name == "default" and not text:
            text = "the defaults (no variant)"
        out.append((name, " ".join(text.split())))
    return out


def _shown(value: object, limit: int = 90) -> str:
    text = repr(value)
    if len(text) > limit and isinstance(value, (tuple, list)):
        text = f"{text[:limit - 20].rsplit(',', 1)[0]}, … {value[-1]!r}) ({len(value)} values)"
    return text


def describe(spec: str, width: int = 100) -> str:
    """--help's part on a config file: its variants and every `--config.` field with its
    default (that of the variant in `spec`, if any) and meaning."""
    file, _, variant = spec.partition(":")
    config = _load(file)
    stem = pathlib.Path(file).stem
    lines = [f"Variants (--config={stem}:VARIANT):"]
    for name, text in variants(config):
        lines += textwrap.wrap(text, width, initial_indent=f"  {name:<16}",
                               subsequent_indent=" " * 18) or [f"  {name}"]
    lines += textwrap.wrap(f"several joined by '+', applied left to right and smoke last "
                           f"({stem}:X+smoke is X at smoke's sizes)", width,
                           initial_indent=f"  {'A+B':<16}", subsequent_indent=" " * 18)
    fields = field_table(config.get_config(variant or None), getattr(config, "FIELD_DOCS", {}))
    lines += ["", f"Config fields (--config.FIELD=VALUE), with the defaults of "
              f"{stem}{':' + variant if variant else ''}:"]
    for name, value, meaning in fields:
        lines.append(f"  --config.{name}={_shown(value)}")
        lines += textwrap.wrap(meaning, width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                               break_on_hyphens=False)
    return "\n".join(lines)


def named(spec: str):
    """The ConfigDict that `spec` ('PATH[:VARIANT]', as `resolve` gives it) names: the file's
    `get_config(variant)`, before any `--config.` override."""
    file, _, variant = spec.partition(":")
    return _load(file).get_config(variant or None)


def _load(file: str) -> ModuleType:
    """A config module: this package's own where `file` is one of its files, else the file
    loaded by path (as ml_collections loads it)."""
    resolved = pathlib.Path(file).resolve()
    if resolved.parent == FOLDER and resolved.stem in names():
        return module(resolved.stem)
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"config_{resolved.stem}", file)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up while they are made
    spec.loader.exec_module(loaded)
    return loaded
