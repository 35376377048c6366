"""The layout of results documents: the schema version every results.json records, and the
upgrade that reads an older document under the current names (a bottom layer: it imports nothing
of the package; `results` re-exports every name here).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any

# The layout of the results documents, recorded in every one as provenance["schema_version"]
# (every results.json has a provenance): raised by one whenever a study's results.json changes
# so that an older reader would misread it (a key renamed, moved, removed or given another
# meaning; adding a key needs no new version). `anisotropy-jax show` refuses a newer version.
# A document without it predates versioning: version 0, read as version 1.
# Version 2: provenance names its study; every per-layer metric has one name in every study
# (metrics.LAYER_METRICS): SCHEMA_1_METRIC_NAMES. Version 3: the attention normalisation
# 'sigmoid' is Ramapuram et al.'s σ(ℓ − ln L), one scalar bias; the one older documents call
# 'sigmoid' (a bias −ln n per query) is 'sigmoid_per_query_bias': SCHEMA_2_NORMALIZATION_NAMES.
# Read older documents with `read_results` (or pass them through `upgrade`), never with json.load
# alone.
RESULTS_SCHEMA_VERSION = 3
# The per-layer metric keys of a schema-1 document that schema 2 renamed, old → new, wherever the
# key occurs in the document (also after the training analysis's "before_"/"after_" prefixes of
# the final norm's states). The numbers are the same quantities; only the names changed.
SCHEMA_1_METRIC_NAMES = {
    "centered_cosine": "centered_average_cosine",  # training analysis, normalisation grid
    "massive_ratio": "massive_top_ratio",  # training analysis, normalisation grid
    "twonn": "twonn_dimension",  # extreme-token study's states
    "gride": "gride_dimension",  # extreme-token study's states
}
_RENAMED_PREFIXES = ("", "before_", "after_")
# The attention normalisations (config/model.py ATTENTION_NORMALIZATIONS) that schema 3 renamed,
# old → new. A name is renamed where a document uses it as a normalisation: a dict key (the
# normalisation grid's cells and runs), the value of "normalization" or "attention_normalization",
# an item of a "normalizations" or "compare_values" list, and "attention_normalization=NAME" in a
# run label (the sweep's).
SCHEMA_2_NORMALIZATION_NAMES = {"sigmoid": "sigmoid_per_query_bias"}
_NORMALIZATION_VALUE_KEYS = ("normalization", "attention_normalization")
_NORMALIZATION_LIST_KEYS = ("normalizations", "compare_values")
_NORMALIZATION_IN_LABEL = re.compile(
    r"attention_normalization=(%s)(?=,|$)" % "|".join(map(re.escape,
                                                          SCHEMA_2_NORMALIZATION_NAMES)))


def schema_version(doc: Any) -> int:
    """The results schema of a document: provenance["schema_version"], 0 when it has none (a
    document that predates versioning, read as version 1)."""
    provenance = doc.get("provenance") if isinstance(doc, dict) else None
    version = provenance.get("schema_version", 0) if isinstance(provenance, dict) else 0
    return version if isinstance(version, int) else 0


def _renamed(key: str) -> str:
    for prefix in _RENAMED_PREFIXES:
        if key.startswith(prefix) and key[len(prefix):] in SCHEMA_1_METRIC_NAMES:
            return prefix + SCHEMA_1_METRIC_NAMES[key[len(prefix):]]
    return key


def _rename_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {_renamed(k) if isinstance(k, str) else k: _rename_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rename_keys(v) for v in obj]
    return obj


def _label(text: str) -> str:
    return _NORMALIZATION_IN_LABEL.sub(
        lambda m: "attention_normalization=" + SCHEMA_2_NORMALIZATION_NAMES[m.group(1)], text)


def _rename_normalizations(obj: Any, key: str | None = None, in_list: bool = False) -> Any:
    """`obj` with the normalisation names of SCHEMA_2_NORMALIZATION_NAMES renamed where they
    name a normalisation (see there); `key` is the dict key `obj` sits under, `in_list` whether
    it sits (at any depth) in a list under one of _NORMALIZATION_LIST_KEYS."""
    names = SCHEMA_2_NORMALIZATION_NAMES
    if isinstance(obj, dict):
        return {(names.get(k, _label(k)) if isinstance(k, str) else k):
                _rename_normalizations(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        inside = in_list or key in _NORMALIZATION_LIST_KEYS
        return [_rename_normalizations(v, key, inside) for v in obj]
    if isinstance(obj, str):
        if obj in names and (in_list or key in _NORMALIZATION_VALUE_KEYS):
            return names[obj]
        return _label(obj)
    return obj


def upgrade(doc: Any) -> Any:
    """A results document with the names of the current schema, into a new document (the numbers
    are untouched; the provenance keeps its schema_version, which says what was written): one of
    schema 1 (or of none, also a study's intermediate files such as the normalisation grid's
    grid_run.json of an older version) gets every key of SCHEMA_1_METRIC_NAMES renamed, at any
    depth; one of schema 2 or older the normalisations of SCHEMA_2_NORMALIZATION_NAMES. A
    document of the current schema or newer is returned as it is (`anisotropy-jax show` refuses
    a newer)."""
    version = schema_version(doc)
    if not isinstance(doc, dict) or version >= 3:
        return doc
    return _rename_normalizations(_rename_keys(doc) if version < 2 else doc)


def read_results(path: str | os.PathLike) -> Any:
    """A results JSON file (results.json, or a study's JSON of the same layout), upgraded to the
    current metric names (`upgrade`): every reader of results goes through here."""
    return upgrade(json.loads(pathlib.Path(path).read_text()))
