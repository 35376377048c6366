"""The study protocol: the four verbs every study offers (`Study`, driven by `cli.main`) and the
one progress type every study reports through (`Progress`). A bottom layer: it imports nothing
else from the package.

A study is a `Study` value (each study package exports one, `STUDY`):
  validate(config, workdir, **flags) → plan   the --config ConfigDict (or any mapping) and the
      script's extra flags → a typed, frozen, checked plan; a one-line ConfigError naming the field
      before anything is compiled
  run(plan, progress) → result                the measurement (numpy); it writes no results. The
      resumable studies keep their state in the workdir (training checkpoints, depth chunks) and
      the studies made of studies (cross-modal, seeds, reproduce) write each part's own outputs.
  write(result, workdir, provenance) → doc    every output file, results.json last (atomically);
      returns the results document, or None where this process writes nothing
  format_report(doc, workdir) → text          what the script prints

A workdir holds one run: the driver records the command and its resolved config in
WORKDIR/workdir.json before the run starts (`workdir_record`) and refuses, before anything is
validated or compiled, a run of another command or another config into it (`workdir_conflict`);
the same command again resumes or overwrites as before.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Any, Callable, Iterable, Iterator, Mapping


@dataclasses.dataclass(frozen=True)
class Study:
    """A study as `cli.main` drives it (module docstring), and what its process needs:

      on_demand_memory  let XLA allocate GPU memory as programs need it (a small job: no 75%
                        reservation at start-up; `cli.allocate_device_memory_on_demand`)
      quiet_logs        absl logging at WARNING (orbax logs every checkpoint save at INFO)
      fast_exit         end with `cli.exit_without_teardown` once the report is printed (not with
                        --distributed, whose shutdown runs at exit)
    """

    validate: Callable[..., Any]
    run: Callable[[Any, "Progress"], Any]
    write: Callable[[Any, Any, Any], Mapping[str, Any] | None]
    format_report: Callable[[Mapping[str, Any], Any], str]
    on_demand_memory: bool = False
    quiet_logs: bool = False
    fast_exit: bool = False


WORKDIR_FILE = "workdir.json"  # {"command": name, "config": the resolved config} of the run


def workdir_record(command: str, config: Any) -> dict[str, Any]:
    """What WORKDIR_FILE holds for `command` run with `config` (a ConfigDict or a mapping), as
    plain JSON values: tuples are lists, anything JSON lacks is its repr."""
    plain = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    return {"command": command, "config": json.loads(json.dumps(plain, default=repr))}


def config_difference(old: Any, new: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """(dotted field, old value, new value) of the first differing leaf of two JSON values (a
    field one side lacks is None there), or None where they are equal. The one comparison of a
    recorded config with a new one: the workdir guard here, a training run's resume
    (`studies.training.logs`) and a report's studies (`studies.report.runner`) all use it."""
    if _canonical(old) == _canonical(new):
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            found = config_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if found:
                return found
    return prefix[:-1], old, new


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)  # NaN != NaN as values; as text they are equal


def with_defaults(recorded: Any, defaults: Any) -> Any:
    """`recorded` (a JSON value) with every field it lacks taken from `defaults`, at every level
    where both are objects: a field added to a config since a run was recorded counts as its
    default there."""
    if not (isinstance(recorded, dict) and isinstance(defaults, dict)):
        return recorded
    return {**defaults, **{key: with_defaults(value, defaults.get(key))
                           for key, value in recorded.items()}}


def workdir_conflict(workdir: pathlib.Path, command: str, config: Any,
                     defaults: Any = None) -> str | None:
    """Why `command` with `config` must not run into `workdir`, as one line; None where it may:
    the folder has no WORKDIR_FILE (new, or made before this file existed) or holds a run of
    the same command and config. Unreadable records are refused rather than overwritten.
    `defaults` (the config as named, before its overrides) fills the fields the record lacks
    (`with_defaults`): a run recorded before a field was added resumes with its default."""
    path = pathlib.Path(workdir) / WORKDIR_FILE
    if not path.is_file():
        return None
    try:
        old = json.loads(path.read_text())
        old_command, old_config = old["command"], old["config"]
    except (OSError, ValueError, TypeError, KeyError) as error:
        return f"--workdir: {path} is unreadable ({type(error).__name__}); use another --workdir"
    if old_command != command:
        return (f"--workdir: {workdir} holds a run of `{old_command}`, not `{command}`; use "
                f"another --workdir")
    if defaults is not None:
        old_config = with_defaults(old_config, workdir_record(command, defaults)["config"])
    difference = config_difference(old_config, workdir_record(command, config)["config"])
    if difference is None:
        return None
    field, was, now = difference
    return (f"--workdir: {workdir} holds a `{command}` run of another config "
            f"({field or 'config'}={json.dumps(was)} there, {json.dumps(now)} here); use another "
            f"--workdir, or delete {workdir} to start again")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a study that knows where it was: `step`, the training step being made when it
    came (`cli.user_errors` prints "interrupted at step N; rerun the same command to resume")."""

    def __init__(self, step: int):
        super().__init__(f"interrupted at step {step}")
        self.step = step


_OPEN_BARS: list[Any] = []  # bars on screen: a note is written around them (tqdm.write)


def _to_stderr(text: str) -> None:
    if _OPEN_BARS:
        _OPEN_BARS[-1].write(text, file=sys.stderr)
    else:
        print(text, file=sys.stderr, flush=True)


class Bar:
    """A progress bar on stderr (tqdm), or nothing where bars are off: `update(n, **postfix)`,
    `close()`; a context manager."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int, show: bool):
        self._bar = None
        if show:
            from tqdm import tqdm  # only where a bar is drawn

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit,
                             file=sys.stderr, mininterval=1.0, dynamic_ncols=True)
            _OPEN_BARS.append(self._bar)

    def update(self, n: int = 1, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(refresh=False, **postfix)

    def close(self) -> None:
        if self._bar is not None:
            _OPEN_BARS.remove(self._bar)
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a running study reports, and whether it is shown: the one progress type.

      say(text)    a line of the run's own output on stdout: per chunk, per model, a header
      note(text)   a line on stderr: resuming, a checkpoint saved
      tick(text)   a line on stderr per item done, shown only with bars (it stands in for one)
      bar(...)     a tqdm bar on stderr (`Bar`); track(items, desc, unit) iterates with one
      mark(phase)  the end of a phase (`cli.PhaseTimes.mark`: the main job's --phase_times)
      within(label)  the same, with "[label] " before every `say` line
      quiet()      the same without bars and ticks (a study run inside another)

    `lines` off shows nothing (SILENT, the library's default); `bars` is the scripts' --progress.
    """

    lines: bool = True
    bars: bool = True
    label: str = ""
    marker: Callable[[str], None] | None = None

    def say(self, text: str) -> None:
        if self.lines:
            line = f"[{self.label}] {text}" if self.label else text
            if _OPEN_BARS:  # around the bars on stderr, not through them
                _OPEN_BARS[-1].write(line, file=sys.stdout)
                sys.stdout.flush()
            else:
                print(line, flush=True)

    def note(self, text: str) -> None:
        if self.lines:
            _to_stderr(text)

    def tick(self, text: str) -> None:
        if self.lines and self.bars:
            _to_stderr(text)

    def mark(self, phase: str) -> None:
        if self.marker is not None:
            self.marker(phase)

    def bar(self, total: int | None, desc: str, unit: str = "it", initial: int = 0) -> Bar:
        return Bar(total, desc, unit, initial, self.lines and self.bars)

    def track(self, items: Iterable[Any], desc: str, unit: str = "it") -> Iterator[Any]:
        items = list(items)
        with self.bar(len(items), desc, unit) as bar:
            for item in items:
                yield item
                bar.update()

    def within(self, label: str) -> "Progress":
        return dataclasses.replace(self, label=label)

    def quiet(self) -> "Progress":
        return dataclasses.replace(self, bars=False)


SILENT = Progress(lines=False, bars=False)
