"""Command-line edge shared by the experiment scripts: absl flag parsing with one-line errors."""
from __future__ import annotations

import sys

from absl import flags


def parse_flags_or_exit(argv: list[str]) -> list[str]:
    """absl's parser, but any flag or config-override error is one line and exit status 2."""
    try:
        return flags.FLAGS(argv)
    except Exception as error:  # noqa: BLE001 - flag errors, unknown --config.X, bad variants
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        message = lines[-1] if lines else type(error).__name__
        if isinstance(error, (AttributeError, KeyError)):
            bad = [a.split("=")[0] for a in argv[1:] if a.startswith("--config.")
                   and message.strip("\"'") in a.split("=")[0].split(".")]
            message = f"{bad[0] if bad else message}: unknown config field"
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
