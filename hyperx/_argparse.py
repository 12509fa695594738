"""Command-line helpers shared by the ``hyperx`` subcommands: one-line errors, exit status 2."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def fail(message: str) -> NoReturn:
    """Print ``hyperx: error: message`` (one line) on stderr and exit with status 2."""
    sys.stderr.write(f"hyperx: error: {' '.join(str(message).split())}\n")
    raise SystemExit(2)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        fail(message)


def positive_int(text: str) -> int:
    """``argparse`` type: an int > 0, with a message that names what was expected."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
