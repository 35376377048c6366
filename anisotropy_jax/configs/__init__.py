"""The experiment configs, inside the package so that an installed `anisotropy-jax` finds them
from any folder: one module per config, each `get_config(variant)` → an ml_collections
ConfigDict (the dataclasses' defaults of anisotropy_jax/config, then the named variant), its
`VARIANTS`, a docstring with the command and a description of every variant, and `FIELD_DOCS`
(where each field's meaning is written: anisotropy_jax/config/docs.py). experiments/configs/
re-exports them, so `--config=experiments/configs/<name>.py:VARIANT` works as before.

`--config` takes a file (`PATH[:VARIANT]`) or a name (`NAME[:VARIANT]`, a module here or one of
its ALIASES: `sweep:control`), or `:VARIANT` for the command's own config (`resolve`).
"""
from __future__ import annotations

import importlib
import pathlib
import re
import textwrap
from types import ModuleType

from anisotropy_jax.config.docs import field_table

FOLDER = pathlib.Path(__file__).resolve().parent
NAMES = ("bias_sweep", "depth_sweep", "train_clm", "train_mlm", "qk_dynamics",
         "pretrained_anisotropy", "cross_modal", "embedding_isotropy", "checkpoint_series",
         "reproduce", "extreme_tokens", "normalization_grid")
# Short names: the command names of `anisotropy-jax` (anisotropy_jax/commands.py) and the objectives.
ALIASES = {"sweep": "bias_sweep", "depth": "depth_sweep", "train": "train_clm",
           "clm": "train_clm", "mlm": "train_mlm", "dynamics": "qk_dynamics",
           "pretrained": "pretrained_anisotropy", "cross-modal": "cross_modal",
           "embeddings": "embedding_isotropy", "series": "checkpoint_series",
           "report": "reproduce", "extreme": "extreme_tokens",
           "normalizations": "normalization_grid"}


def canonical(name: str) -> str | None:
    """The module name of a config name or alias, or None."""
    name = ALIASES.get(name, name)
    return name if name in NAMES else None


def path(name: str) -> pathlib.Path:
    """The file of a named config (KeyError if there is none)."""
    found = canonical(name)
    if found is None:
        raise KeyError(name)
    return FOLDER / f"{found}.py"


def module(name: str) -> ModuleType:
    return importlib.import_module(f"anisotropy_jax.configs.{canonical(name) or name}")


def known() -> str:
    """The names --config accepts, for error messages and --help."""
    return ", ".join(sorted(ALIASES) + [n for n in NAMES if n not in ALIASES.values()])


def resolve(spec: str, own: str | None = None) -> str:
    """The `--config` value as ml_collections reads it: 'PATH[:VARIANT]'. An existing file stays
    as it is; otherwise 'NAME[:VARIANT]' names a config of this package (an alias or a module
    name; also experiments/configs/<name>.py from a folder without that file), and ':VARIANT' the
    command's own config `own` (a path). Raises KeyError naming what is not found."""
    file, sep, variant = spec.partition(":")
    if not file and own is not None:
        return own.partition(":")[0] + sep + variant
    if pathlib.Path(file).expanduser().is_file():
        return spec
    stem = pathlib.Path(file)
    name = file if canonical(file) else (
        stem.stem if stem.suffix == ".py" and stem.parent.name == "configs" else None)
    if name is None or canonical(name) is None:
        raise KeyError(file)
    return f"{path(name)}{sep}{variant}"


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
    fields = field_table(config.get_config(variant or None), getattr(config, "FIELD_DOCS", {}))
    lines += ["", f"Config fields (--config.FIELD=VALUE), with the defaults of "
              f"{stem}{':' + variant if variant else ''}:"]
    for name, value, meaning in fields:
        lines.append(f"  --config.{name}={_shown(value)}")
        lines += textwrap.wrap(meaning, width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                               break_on_hyphens=False)
    return "\n".join(lines)


def _load(file: str) -> ModuleType:
    """A config module: this package's own where `file` is one of its files (or re-exports one),
    else the file loaded by path (as ml_collections loads it)."""
    stem = pathlib.Path(file).stem
    if canonical(stem) and (pathlib.Path(file).resolve().parent in (FOLDER,)
                            or f"anisotropy_jax.configs.{stem}" in pathlib.Path(file).read_text()):
        return module(stem)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"config_{stem}", file)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
