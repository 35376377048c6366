"""The experiment scripts' edge: `main(study)` drives any study of the protocol
(`anisotropy_jax.protocol`: validate → run → write → format_report), with absl flag parsing and
one error idiom for every script.

Every expected user error — a bad flag, config field, file, model directory or workdir (one holding
another command's or config's run: `protocol.workdir_conflict`) — is one stderr line "error:
<field>: <message>" and exit status 2, before anything is compiled; a run that fails numerically (a
non-finite metric or loss), or whose files cannot be written (a full disk, a read-only folder),
exits with status 1 and one line naming where; Ctrl-C with status 130 and "interrupted[ at step N];
rerun the same command to resume" (`user_errors`). --help lists the flags, the config's variants and
every `--config.` field with its default and meaning; --print_config prints the resolved config and
exits; --config takes a file or a named config of `anisotropy_jax.configs` (`sweep:control`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import pathlib
import sys
import tempfile
import textwrap
import time
from typing import Any, Iterator, NoReturn

from absl import app, flags

from anisotropy_jax import configs, results
from anisotropy_jax.config import ConfigError
from anisotropy_jax.protocol import Progress, Study, WORKDIR_FILE, workdir_conflict, workdir_record

_CACHE = flags.DEFINE_string(
    "compilation_cache", "default",
    "JAX's persistent compilation cache for this run: 'default' = $JAX_COMPILATION_CACHE_DIR if "
    "set, else ~/.cache/anisotropy_jax/jax; a folder; or 'off'. A second run of the same shapes "
    "then skips compilation.")
# Every compilation is cached (JAX's default skips those under 1 s): otherwise the main job's small
# jits (PRNG seeding, iota, fold_in) compile anew in every run (measured: docs/PERFORMANCE.md,
# "Seconds to results").
CACHE_MIN_COMPILE_SECONDS = 0.0


def default_cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / \
        "anisotropy_jax" / "jax"


def enable_compilation_cache(setting: str = "default") -> pathlib.Path | None:
    """Turns on JAX's persistent compilation cache ('default', a folder, or 'off'); returns the
    folder used, or None. An explicit JAX_COMPILATION_CACHE_DIR (e.g. a test's) wins over
    'default'."""
    if setting == "off":
        return None
    import jax  # only here: the flag-parsing path stays free of JAX

    if setting == "default":
        env = os.environ.get("JAX_COMPILATION_CACHE_DIR")
        folder = pathlib.Path(env) if env else default_cache_dir()
    else:
        folder = pathlib.Path(setting).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail(f"--compilation_cache: cannot create {folder} ({error.strerror})")
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          CACHE_MIN_COMPILE_SECONDS)
    return folder


class PhaseTimes:
    """Wall-clock stamps of a script's phases, for benchmarks/process_time.py: `mark(name)` records
    time.time() (epoch seconds, so that a parent process can subtract its own spawn time) when the
    phase `name` ends; `write()` saves {"stamps": [[name, seconds], ...]} as JSON to `path`. With
    no path it records nothing and writes nothing."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = pathlib.Path(path) if path else None
        self.stamps: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        if self.path is not None:
            self.stamps.append((name, time.time()))

    def write(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"stamps": self.stamps}) + "\n")


def exit_without_teardown(status: int = 0) -> NoReturn:
    """Flushes stdout, stderr and logging, then ends the process with `os._exit`: the interpreter's
    teardown of the JAX, XLA, Flax and matplotlib modules would add 0.3-0.5 s to every run (2-core
    CPU, benchmarks/process_time.py). Only for the end of a run whose files are all written and
    closed; not with jax.distributed, whose shutdown runs at exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(status)


def allocate_device_memory_on_demand() -> None:
    """Lets XLA allocate GPU memory as programs need it instead of reserving 75% of the card at
    start-up (XLA_PYTHON_CLIENT_PREALLOCATE=false; a value the user set wins): for a small job
    such as the main job that reservation costs a noticeable share of every run (measured:
    docs/PERFORMANCE.md). Call before JAX's first device operation."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def fail(message: str, status: int = 2) -> NoReturn:
    """Prints "error: message" (one line) to stderr and exits with `status`."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    sys.exit(status)


def parse_flags_or_exit(argv: list[str], context: "Context | None" = None) -> list[str]:
    """absl's parser (the `flags_parser` of `app.run`), but any flag, config-file or
    config-override error is one line and exit status 2. With the `context` of `main`: --help
    prints `help_text` and exits, and --config also takes a named config (`configs.resolve`)."""
    if context is not None:
        if any(arg in HELP_FLAGS for arg in argv[1:]):
            print(help_text(context, argv))
            sys.exit(0)
        argv = resolve_config_args(argv, context.default)
        context.parsed[:] = argv  # what ml_collections reads the --config.FIELD overrides from
    try:
        rest = flags.FLAGS(argv)
        if "config" in flags.FLAGS and flags.FLAGS["config"].value is not None:
            list(flags.FLAGS["config"].value)  # ml_collections loads a config file lazily
    except Exception as error:  # noqa: BLE001 - flag errors, unknown --config.X, bad variants
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        message = lines[-1] if lines else type(error).__name__
        if isinstance(error, (AttributeError, KeyError)):
            bad = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")
                   and message.strip("\"'") in a.split("=")[0].split(".")]
            message = f"{bad[0] if bad else message}: unknown config field"
        elif ("Error whilst parsing config file" in str(error)
              or "Failed loading config file" in str(error)):
            # A config file that raised (e.g. an unknown variant) or could not be read: its flag
            # and the exception's last line, without the traceback or the exception's class.
            message = f"--config: {message.split(': ', 1)[-1] if 'Error: ' in message else message}"
        fail(message)
    if len(rest) > 1:
        fail(f"unexpected arguments: {' '.join(rest[1:])}")
    # JAX logs "Unable to initialize backend 'tpu': ..." at INFO on every machine without one,
    # which reads like an error: its backend probing logs at WARNING and above only.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    enable_compilation_cache(_CACHE.value)
    # Threefry draws lowered to JAX's own GPU kernel instead of XLA code: the same bits, and the
    # sweep's seed draws compile faster (docs/PERFORMANCE.md, "Retired profilers"). No effect off
    # GPUs.
    import jax  # the scripts import it anyway; this module's import stays free of it

    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    return rest


def require_flag(value, name: str, example: str = ""):
    """The value of a required flag, or the one-line error naming it."""
    if value in (None, ""):
        fail(f"--{name}: required" + (f", e.g. --{name}={example}" if example else ""))
    return value


def workdir(value: str | None) -> pathlib.Path:
    """The required --workdir as a path."""
    return pathlib.Path(require_flag(value, "workdir", "runs/NAME"))


def check_workdir(folder: pathlib.Path) -> None:
    """A workdir that can be written: a folder, or a path whose nearest existing parent is a
    folder that a file can be created in. Anything else is one line, before anything runs;
    nothing is created here."""
    if folder.exists() and not folder.is_dir():
        fail(f"--workdir: {folder} is a file, not a folder")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        fail(f"--workdir: {folder} is inside {existing}, which is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        fail(f"--workdir: cannot write in {existing} ({error.strerror or error})")


def claim_workdir(folder: pathlib.Path, command: str, config: Any) -> None:
    """Records `command` and its config in the workdir (`protocol.WORKDIR_FILE`), once its config
    is valid and before it runs: an interrupted run is claimed too. Written only where absent
    (`workdir_conflict` has refused a different record), so that a resumed run leaves it be."""
    path = folder / WORKDIR_FILE
    if not path.is_file():  # json.dumps, not write_json: a NaN stays NaN, equal on reading
        results.write_text(path, json.dumps(workdir_record(command, config), indent=1) + "\n")


def refuse_another_run(folder: pathlib.Path, command: str, config_flag: Any) -> None:
    """Exits (`fail`) where `folder` holds a run of another command or config
    (`protocol.workdir_conflict`); a field the recorded config lacks counts as its default in the
    config as named by --config (before the --config. overrides)."""
    from ml_collections import config_flags

    named = configs.named(config_flags.get_config_filename(flags.FLAGS[config_flag.name]))
    refused = workdir_conflict(folder, command, config_flag.value, defaults=named)
    if refused:
        fail(refused)


# Errors of the machine rather than the run: one line naming the file, exit status 1.
DISK_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EFBIG: "file too large", errno.EROFS: "read-only file system",
               errno.EACCES: "permission denied", errno.EPERM: "operation not permitted"}
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a Ctrl-C


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """ConfigError (and FileNotFoundError of a missing input) → exit 2; FloatingPointError
    (a run that overflowed or diverged) → exit 1; a full disk or a file that cannot be written
    → exit 1; Ctrl-C → "interrupted[ at step N]; rerun the same command to resume", exit 130.
    Each as one line."""
    try:
        yield
    except (ConfigError, FileNotFoundError) as error:
        fail(str(error))
    except FloatingPointError as error:
        fail(str(error), status=1)
    except KeyboardInterrupt as error:
        step = getattr(error, "step", None)
        fail(f"interrupted{'' if step is None else f' at step {step}'}; rerun the same command "
             "to resume", status=INTERRUPTED_STATUS)
    except OSError as error:
        if error.errno not in DISK_ERRNOS:
            raise
        fail(f"{error.filename or 'writing the results'}: {DISK_ERRNOS[error.errno]}", status=1)


@dataclasses.dataclass(frozen=True)
class Context:
    """What `main` knows of its command, for --help and named configs: the command line's name
    (`prog`), its description (`usage`), its config (`default`: the path its --config falls back
    to, or `example`: the file its error names where --config is required), its own flags, and
    the command line as parsed (`parsed`, filled by `parse_flags_or_exit`)."""

    prog: str
    usage: str
    default: str | None
    example: str | None
    script_flags: tuple[str, ...]
    parsed: list[str] = dataclasses.field(default_factory=list)


HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def resolve_config_args(argv: list[str], own: str | None) -> list[str]:
    """argv with a --config value that names a config (`sweep:control`, `:smoke`) replaced by
    its file (`configs.resolve`), and put before the `--config.FIELD` overrides (which
    ml_collections reads only after it); an unknown name is one line."""
    out, args, config = list(argv[:1]), list(argv[1:]), []
    while args:
        arg = args.pop(0)
        if arg == "--config" and args:
            arg = "--config=" + args.pop(0)
        if arg.startswith("--config="):
            value = arg.split("=", 1)[1]
            try:
                arg = "--config=" + configs.resolve(value, own)
            except KeyError:
                fail(f"--config: {value.partition(':')[0]!r} is neither a config file nor a named "
                     f"config ({configs.known()})")
            config.append(arg)
        else:
            out.append(arg)
    if not config and own and any(arg.startswith("--config.") for arg in out[1:]):
        config.append(f"--config={own}")  # ml_collections reads overrides only after a --config
    return out[:1] + config + out[1:]


def _config_spec(context: Context, argv: list[str]) -> str | None:
    given = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")]
    try:
        return configs.resolve(given[-1], context.default) if given else (
            context.default or (configs.resolve(context.example) if context.example else None))
    except KeyError:
        return None


def help_text(context: Context, argv: list[str]) -> str:
    """--help: the usage, every flag with its default, the config's variants and every
    `--config.` field with its default and meaning."""
    lines = [f"usage: {context.prog} "
             + ("--config=CONFIG[:VARIANT] " if context.example else "[--config=CONFIG[:VARIANT]] ")
             + "--workdir=DIR [--config.FIELD=VALUE ...] [flags]", ""]
    lines += [textwrap.fill(part, 100) if context.prog.startswith("anisotropy-jax") else part
              for part in [context.usage.strip()]]
    lines += ["", "Flags:"]
    for name in ("config", "workdir", "print_config", "compilation_cache", *context.script_flags):
        flag = flags.FLAGS[name]
        default = "" if flag.default in (None, "") or name == "config" else \
            f" (default: {flag.default})"
        lines.append(f"  --{name}{default}")
        lines += textwrap.wrap(" ".join(flag.help.split()), 100, initial_indent=" " * 6,
                               subsequent_indent=" " * 6)
    spec = _config_spec(context, argv)
    if spec is not None:
        lines += ["", configs.describe(spec)]
    return "\n".join(lines)


def main(study: Study, config: str | None = None, *, config_default: str | None = None,
         workdir_help: str = "Output folder (created if missing).", prog: str | None = None,
         usage: str | None = None, argv: list[str] | None = None, claim: str | None = None,
         **script_flags: Any) -> None:
    """The whole of an experiment script: defines --config (required, `config` the example its
    error names; or `config_default`) and --workdir, parses the flags (`parse_flags_or_exit`:
    one-line errors, --help, named configs, the compilation cache), then
    `study.validate(config, workdir, **flags)` → `run(plan, progress)` →
    `write(result, workdir, provenance)` → prints `format_report(doc, workdir)`; with
    --print_config only prints the config. `script_flags` are the script's own flag holders,
    passed by name to validate, except two read here: `progress` (bars on stderr) and
    `phase_times` (a file for the phases' end times). `prog`, `usage` and `argv` default to the
    script's name, its docstring and sys.argv (`anisotropy_jax.commands` passes its own).
    `claim`, the command's name, makes the workdir this run's (`claim_workdir`); None leaves
    the workdir unclaimed (a study whose workdir is another's, or one that checks its parts)."""
    from ml_collections import config_flags

    argv = list(sys.argv if argv is None else argv)
    context = Context(prog or os.path.basename(argv[0]),
                      usage if usage is not None else (sys.modules["__main__"].__doc__ or ""),
                      config_default, config, tuple(script_flags))
    config_flag = config_flags.DEFINE_config_file(
        "config", config_default,
        f"Config: a file or a named config ({configs.known()}), with :VARIANT, e.g. "
        f"{(config or 'NAME').partition(':')[0]}:smoke.", lock_config=True,
        sys_argv=context.parsed)
    workdir_flag = flags.DEFINE_string("workdir", None, workdir_help)
    print_flag = flags.DEFINE_bool(
        "print_config", False, "Print the resolved config (the variant and every --config. "
        "override) as JSON and exit without running.")
    command = " ".join([prog, *argv[1:]]) if prog else " ".join(["python", *argv])
    app.run(functools.partial(_drive, study, (config_flag, workdir_flag, print_flag), config,
                              command, claim, script_flags),
            argv=argv, flags_parser=functools.partial(parse_flags_or_exit, context=context))


def _drive(study: Study, holders: tuple[Any, Any, Any], example: str | None, command: str,
           claim: str | None, script_flags: dict[str, Any], argv: list[str]) -> None:
    del argv  # parse_flags_or_exit refuses extra arguments
    config_flag, workdir_flag, print_flag = holders
    if print_flag.value:  # no --workdir needed
        if example is not None:
            require_flag(config_flag.value, "config", example)
        print(config_flag.value.to_json_best_effort(indent=2), flush=True)
        return
    if study.on_demand_memory:
        allocate_device_memory_on_demand()
    options = {name: holder.value for name, holder in script_flags.items()}
    phases = PhaseTimes(options.pop("phase_times", None))
    phases.mark("start_imports_flags")
    if study.quiet_logs:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
    progress = Progress(bars=options.pop("progress", True), marker=phases.mark)
    folder = workdir(workdir_flag.value)
    if example is not None:
        require_flag(config_flag.value, "config", example)
    check_workdir(folder)
    if claim is not None:
        refuse_another_run(folder, claim, config_flag)
    with user_errors():
        plan = study.validate(config_flag.value, folder, **options)  # nothing compiled yet
        if claim is not None:
            claim_workdir(folder, claim, config_flag.value)
        provenance = results.Provenance(command=command)
        doc = study.write(study.run(plan, progress), folder, provenance)
    if doc is None:  # nothing written here (a process other than the first)
        return
    print(study.format_report(doc, folder), flush=True)
    phases.mark("table")
    phases.write()
    if study.fast_exit and not options.get("distributed"):
        exit_without_teardown()  # jax.distributed shuts down at interpreter exit: keep that
