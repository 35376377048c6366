"""Building the tidy table: numbers out of JSON, blocks of rows over a grid of axes, and the one
table they make.

A block is the rows of one group of metrics: the cartesian product of its axes (seed, s, state,
...) with one column per metric, every array of the axes' shape (scalars broadcast), plus
constant columns (study, model, ...). `assemble` stacks the blocks, merges rows that share every
index column (a step's losses and its embedding metrics are one row) and puts the index columns
first, in `INDEX` order.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping, Sequence

import numpy as np

# The index columns, in this order, where a study has them; every other column is a metric.
#   study         the study whose results these are (provenance["study"], e.g. "sweep")
#   part          the subfolder of a workdir of several runs (a report: "training/clm")
#   run           a run of the study's grid (the sweep's "inputs=biased", depth's "post_d128")
#   model         the model measured (pretrained, cross_modal, extreme), or the normalisation
#                 grid's "dataset/normalization" cell
#   weights       "trained" or "untrained" (a model re-initialised with its family's init)
#   inputs        the extreme-token study's input kind ("natural", "random", "repeated")
#   dataset, normalization, architecture, modality, width: the grid's other axes
#   seed          the seed (an index: 0 = the first seed of the run)
#   step          the training step of a checkpoint
#   s             the bias norm of the inputs x = z + s·u
#   state         a hidden state: 0 = the embeddings' output (the input), i = after block i
#   label         the state's name ("embeddings", "layer_3", "final_norm")
#   layer         a block, 1 = the first (its heads, its input/attention/output sites)
#   head          a head of that block, from 0
#   arm           an intervention on a block's input (the extreme study's intervention
#                 variant): "baseline", "<arm>/<mean>/<norm>", "random/<mean>/<norm>"
#   sequence      an input sequence of the batch, from 0
INDEX = ("study", "part", "run", "model", "weights", "inputs", "dataset", "normalization",
         "architecture", "modality", "width", "seed", "step", "s", "state", "label", "layer",
         "head", "arm", "sequence")


def pandas() -> Any:
    """pandas, or ImportError naming the extra that installs it."""
    try:
        return importlib.import_module("pandas")
    except ImportError as error:
        raise ImportError("results as tables need pandas: pip install -e '.[tables]' (or "
                          "pip install pandas)") from error


def numbers(value: Any) -> np.ndarray:
    """A float64 array of a JSON value: nested lists of numbers, where results.to_jsonable
    wrote the non-finite floats as "nan", "inf", "-inf" and an undefined value is null (NaN);
    booleans become 0/1. ValueError for lists of unequal lengths or other strings."""
    array = np.asarray(value, dtype=object)
    if array.dtype == object and array.size:
        flat = [np.nan if v is None else (float(v) if isinstance(v, str) else v)
                for v in array.ravel()]
        if any(isinstance(v, (list, dict)) for v in flat):
            raise ValueError("ragged")
        return np.asarray(flat, dtype=np.float64).reshape(array.shape)
    return array.astype(np.float64)


def is_numeric(value: Any) -> bool:
    """Whether `numbers` reads it (a metric, not a description or a list of names)."""
    try:
        numbers(value)
    except (ValueError, TypeError):
        return False
    return True


def block(axes: Sequence[tuple[str, Sequence[Any]]], metrics: Mapping[str, Any],
          **constants: Any) -> Any:
    """One DataFrame: a row per point of the axes' grid, the axes as columns, every metric of
    the axes' shape (a scalar is repeated) as a column, and the constants. ValueError naming a
    metric of another shape."""
    pd = pandas()
    shape = tuple(len(values) for _, values in axes)
    grids = np.meshgrid(*(np.asarray(values, dtype=object) for _, values in axes),
                        indexing="ij") if axes else []
    data: dict[str, Any] = {name: grid.ravel() for (name, _), grid in zip(axes, grids)}
    size = int(np.prod(shape))
    for name, value in metrics.items():
        array = numbers(value)
        if array.shape not in (shape, ()):
            raise ValueError(f"metric {name!r} has shape {array.shape}, not {shape} "
                             f"({', '.join(n for n, _ in axes)})")
        data[name] = np.broadcast_to(array, shape).ravel()
    for name, value in constants.items():
        data[name] = np.full(size, value, dtype=object)
    return pd.DataFrame(data, index=pd.RangeIndex(size))


def assemble(frames: Sequence[Any]) -> Any:
    """The blocks as one table: rows that share every index column merged (the first non-null
    value of each metric), index columns first (INDEX order), then the metrics in the order
    they came; integer axes stay integers where they have no gap (pandas' nullable Int64)."""
    pd = pandas()
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame(columns=["study"])
    table = pd.concat(frames, ignore_index=True, sort=False)
    index = [c for c in INDEX if c in table.columns]
    metrics = [c for c in table.columns if c not in index]
    if index and len(frames) > 1:
        keys = table[index].astype(object).where(table[index].notna(), None)
        rows = pd.Series(list(map(tuple, keys.to_numpy())), index=table.index)
        table = table.groupby(rows, sort=False, dropna=False).first().reset_index(drop=True)
    for name in ("seed", "step", "state", "layer", "head", "width", "sequence"):
        if name in table.columns:
            table[name] = _integers(pd, table[name])
    return table[index + metrics]


def _integers(pd: Any, column: Any) -> Any:
    values = pd.to_numeric(column, errors="coerce")
    whole = values.dropna()
    return values.astype("Int64") if (whole == whole.round()).all() else values
