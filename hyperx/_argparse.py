"""Command-line helpers shared by the ``hyperx`` subcommands: one-line errors, exit status 2."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import NoReturn

from hyperx._validation import INT32_MAX


def fail(message: str) -> NoReturn:
    """Print ``hyperx: error: message`` (one line) on stderr and exit with status 2."""
    sys.stderr.write(f"hyperx: error: {' '.join(str(message).split())}\n")
    raise SystemExit(2)


def interrupted(message: str) -> NoReturn:
    """After Ctrl-C: print ``hyperx: interrupted: message`` (one line) and exit with 130."""
    sys.stderr.write(f"\nhyperx: interrupted: {' '.join(str(message).split())}\n")
    raise SystemExit(130)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        fail(message)


def _integer(text: str, low: int) -> int:
    """An int in [low, 2**31 - 1] from ``"12"`` or an integral ``"1e8"``."""
    want = f"an integer in [{low}, {INT32_MAX}]"
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
        if not math.isfinite(number) or number != int(number):
            raise argparse.ArgumentTypeError(f"expected {want}, got {text!r}") from None
        value = int(number)
    if not low <= value <= INT32_MAX:
        why = " (the int32 range of the compiled counters)" if value > INT32_MAX else ""
        raise argparse.ArgumentTypeError(f"expected {want}{why}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """``argparse`` type: an int in [1, 2**31 - 1] (``"1e6"`` is accepted)."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """``argparse`` type: an int in [0, 2**31 - 1]."""
    return _integer(text, 0)


def check_out_path(out: str) -> None:
    """Exit with a one-line error unless ``out`` is a directory path that exists or can be
    created (nothing else is checked: see :func:`hyperx._rundir.prepare_out`)."""
    if not out.strip():
        fail(f"--out: expected a directory path, got {out!r}")
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out: {out!r} exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        fail(f"--out: cannot create directory {out!r}: {err.strerror or err}")
    if not os.access(out, os.W_OK | os.X_OK):
        fail(f"--out: directory {out!r} is not writable")


def add_run_dir_options(parser: argparse.ArgumentParser) -> None:
    """``--resume`` and ``--overwrite`` (mutually exclusive) for a command writing ``--out``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true",
                       help="continue the run in --out (same options), skipping finished work")
    group.add_argument("--overwrite", action="store_true",
                       help="replace what another run wrote to --out (other files are kept)")
