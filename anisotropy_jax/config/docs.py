"""The meaning of every config field, read from where it is written once: the `Attributes:`
section of each config dataclass's docstring (and the field lists of the experiment-form
functions' docstrings, e.g. `sweep_config_dict`'s `compare_fields`). The command line's
--help lists them (`anisotropy_jax.configs.describe`).

A documented field is a line indented under the section, `name: meaning` (or `a, b, c: meaning`
for fields that share it), continued on more deeply indented lines.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any, Mapping, Sequence

_ENTRY = re.compile(r"^(\s+)([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*:\s+(\S.*)$")


def attribute_docs(obj: Any) -> dict[str, str]:
    """{field: meaning} of a dataclass's `Attributes:` section, or of every `name: meaning` line
    of a function's docstring (an experiment form's extra fields)."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    if isinstance(obj, type):
        starts = [i for i, line in enumerate(lines) if line.strip() == "Attributes:"]
        lines = lines[starts[0] + 1:] if starts else []
    out: dict[str, str] = {}
    names: list[str] = []
    indent = None
    for line in lines:
        match = _ENTRY.match(line)
        if match and (indent is None or len(match.group(1)) <= indent):
            indent = len(match.group(1))
            names = [n.strip() for n in match.group(2).split(",")]
            for name in names:
                out[name] = match.group(3).strip()
        elif names and line.strip() and indent is not None and \
                len(line) - len(line.lstrip()) > indent:
            for name in names:
                out[name] += " " + line.strip()
        elif line.strip():  # text that is no field: the section ended
            names = []
    return out


def _classes(roots: Mapping[str, Any], path: tuple[str, ...]) -> tuple[Any, ...]:
    """The objects documenting the fields of the ConfigDict at `path`: those `roots` names for
    it, else the dataclass types of the same-named fields of its parent's dataclasses."""
    key = ".".join(path)
    if key in roots:
        found = roots[key]
        return tuple(found) if isinstance(found, (tuple, list)) else (found,)
    if not path:
        return ()
    out = []
    for parent in _classes(roots, path[:-1]):
        if isinstance(parent, type) and dataclasses.is_dataclass(parent):
            hint = typing.get_type_hints(parent).get(path[-1])
            if dataclasses.is_dataclass(hint):
                out.append(hint)
    return tuple(out)


def meaning(roots: Mapping[str, Any], path: Sequence[str]) -> str:
    """The meaning of the field at `path` (a ConfigDict key path), or '' where none is written.
    Looked up in the documenting objects of its parent (`roots`, then field types), then in
    their dataclass-typed fields (a field of a nested config shown at its parent's level)."""
    sources = _classes(roots, tuple(path[:-1]))
    for source in sources:
        text = attribute_docs(source).get(path[-1])
        if text:
            return text
    for source in sources:
        if isinstance(source, type) and dataclasses.is_dataclass(source):
            for hint in typing.get_type_hints(source).values():
                if dataclasses.is_dataclass(hint):
                    text = attribute_docs(hint).get(path[-1])
                    if text:
                        return text
    return ""


def field_table(config: Any, roots: Mapping[str, Any], prefix: tuple[str, ...] = ()
                ) -> list[tuple[str, Any, str]]:
    """[(dotted field, value, meaning)] of every leaf of a (nested) ConfigDict, in its order."""
    out = []
    for name, value in config.items():
        path = prefix + (name,)
        if hasattr(value, "items") and not isinstance(value, (str, bytes)):
            out += field_table(value, roots, path)
        else:
            out.append((".".join(path), value, meaning(roots, path)))
    return out
