"""Orbax checkpoints of training runs, behind a few functions so that a move to the orbax
v1 API touches this file only.

A checkpoint of step s holds the state after s updates (`state`, saved with
`ocp.args.StandardSave`, restored with `ocp.args.StandardRestore` into an abstract tree) and the
JSON position of the data stream (`data`). Every saved step is kept (`max_to_keep=None`): the
checkpoints are the data of the dynamics study. Saves are synchronous and orbax commits a step
atomically (temporary folder, then rename), so a run killed during a save leaves the previous
steps intact.

A checkpoint that cannot be read (corrupt, partial) is reported by name with a warning, moved
aside into `<directory>/../checkpoints_unreadable/<step>` (so that the resumed run can save that
step again), and the previous step is used.
"""
from __future__ import annotations

import logging
import pathlib
import shutil
import warnings
from typing import Any, Iterable

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class UnreadableCheckpointWarning(UserWarning):
    """A checkpoint step could not be restored; the message names its folder."""


def checkpoint_steps(total_steps: int, every: int) -> list[int]:
    """Log-spaced steps 0, 1, 2, 4, 8, … < total_steps, every multiple of `every` (0 = none),
    and total_steps itself; sorted, unique."""
    steps = {0, int(total_steps)}
    power = 1
    while power < total_steps:
        steps.add(power)
        power *= 2
    if every > 0:
        steps.update(range(0, total_steps + 1, every))
    return sorted(s for s in steps if 0 <= s <= total_steps)


class _WithoutReadOnlyNotice(logging.Filter):
    """Drops orbax's "Given directory is read only" warning: opening the checkpoints read-only is
    what the analysis asks for, and the line looked like an error to users."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Given directory is read only" not in record.getMessage()


def manager(directory: str | pathlib.Path, read_only: bool = False) -> ocp.CheckpointManager:
    """A CheckpointManager that keeps every step and saves synchronously. Use as a context."""
    directory = pathlib.Path(directory).absolute()
    options = ocp.CheckpointManagerOptions(max_to_keep=None, create=not read_only,
                                           enable_async_checkpointing=False,
                                           read_only=read_only,
                                           save_interval_steps=0 if read_only else 1)
    quiet = _WithoutReadOnlyNotice()
    loggers = [logging.getLogger("absl"), logging.getLogger()]  # orbax logs through absl's
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        return ocp.CheckpointManager(directory, options=options)
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def save(mngr: ocp.CheckpointManager, step: int, state: Any, data_state: dict) -> None:
    """Saves the train state and the data-stream position as step `step` (synchronous)."""
    mngr.save(int(step), args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                  data=ocp.args.JsonSave(dict(data_state))),
              force=True)
    mngr.wait_until_finished()


def saved_steps(mngr: ocp.CheckpointManager) -> list[int]:
    """Every step with a checkpoint folder, ascending (including unreadable ones)."""
    mngr.reload()
    return sorted(int(s) for s in mngr.all_steps())


def _step_dir(mngr: ocp.CheckpointManager, step: int) -> pathlib.Path:
    return pathlib.Path(str(mngr.directory)) / str(step)


def restore(mngr: ocp.CheckpointManager, step: int, abstract_state: Any,
            with_data: bool = True) -> tuple[Any, dict | None]:
    """(state, data_state) of `step`, restored into `abstract_state` (a tree of
    jax.ShapeDtypeStruct, e.g. from `jax.eval_shape`, optionally with shardings). The result has
    exactly the tree structure of `abstract_state` (namedtuples of optax included)."""
    items = {"state": ocp.args.StandardRestore(abstract_state)}
    if with_data:
        items["data"] = ocp.args.JsonRestore()
    restored = mngr.restore(int(step), args=ocp.args.Composite(**items))
    leaves = jax.tree.leaves(restored["state"])
    treedef = jax.tree.structure(abstract_state)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"checkpoint {_step_dir(mngr, step)} has {len(leaves)} arrays, the "
                         f"model expects {treedef.num_leaves}")
    state = jax.tree.unflatten(treedef, leaves)
    for got, want in zip(leaves, jax.tree.leaves(abstract_state)):
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"checkpoint {_step_dir(mngr, step)} holds an array of shape "
                             f"{tuple(got.shape)} where the model expects {tuple(want.shape)}")
    return state, (restored["data"] if with_data else None)


def report_unreadable(mngr: ocp.CheckpointManager, step: int, error: BaseException,
                      move_aside: bool) -> pathlib.Path:
    """Warns, naming the unreadable checkpoint; optionally moves its folder aside."""
    path = _step_dir(mngr, step)
    message = (f"unreadable checkpoint {path}: {type(error).__name__}: "
               f"{str(error).splitlines()[0][:300] if str(error) else ''}")
    if move_aside and path.exists():
        aside = path.parent.parent / "checkpoints_unreadable" / path.name
        aside.parent.mkdir(parents=True, exist_ok=True)
        if aside.exists():
            shutil.rmtree(aside)
        shutil.move(str(path), str(aside))
        message += f" (moved to {aside}; using the previous checkpoint)"
        mngr.reload()
    warnings.warn(message, UnreadableCheckpointWarning, stacklevel=2)
    log.warning(message)
    return path


def restore_latest(mngr: ocp.CheckpointManager, abstract_state: Any
                   ) -> tuple[int, Any, dict] | None:
    """(step, state, data_state) of the newest readable checkpoint, or None when there is none.

    Each unreadable newer checkpoint is reported by name and moved aside, then the previous one is
    tried.
    """
    for step in reversed(saved_steps(mngr)):
        try:
            state, data_state = restore(mngr, step, abstract_state)
        except Exception as error:  # noqa: BLE001 - any failure to read means "unusable"
            report_unreadable(mngr, step, error, move_aside=True)
            continue
        return step, state, data_state
    return None


def iterate_readable(mngr: ocp.CheckpointManager, abstract_state: Any,
                     steps: Iterable[int] | None = None):
    """Yields (step, state) for every readable checkpoint (ascending); unreadable ones are
    reported by name and skipped (left in place)."""
    for step in (saved_steps(mngr) if steps is None else steps):
        try:
            state, _ = restore(mngr, step, abstract_state, with_data=False)
        except Exception as error:  # noqa: BLE001
            report_unreadable(mngr, step, error, move_aside=False)
            continue
        yield step, state
