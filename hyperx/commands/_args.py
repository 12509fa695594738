"""Command-line helpers shared by the ``hyperx`` subcommands: one-line errors, exit status 2."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from hyperx._validation import INT32_MAX


def fail(message: str) -> NoReturn:
    """Print ``hyperx: error: message`` (one line) on stderr and exit with status 2."""
    sys.stderr.write(f"hyperx: error: {' '.join(str(message).split())}\n")
    raise SystemExit(2)


@contextlib.contextmanager
def failing(prefix: str = "") -> Iterator[None]:
    """Around a check: a ``ValueError`` raised inside exits through :func:`fail` with
    ``prefix`` before its message (``with failing("--eval-only: "): ...``)."""
    try:
        yield
    except ValueError as err:
        fail(f"{prefix}{err}")


def interrupted(message: str) -> NoReturn:
    """After Ctrl-C: print ``hyperx: interrupted: message`` (one line) and exit with 130."""
    sys.stderr.write(f"\nhyperx: interrupted: {' '.join(str(message).split())}\n")
    raise SystemExit(130)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default (``(default: 20)``) unless the option has none
    (``None``, a flag that is off) or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default is argparse.SUPPRESS
                or "default" in text or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2, and whose
    help shows the defaults (:class:`DefaultsHelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        fail(message)


def closest(name: str, choices: Sequence[str]) -> str | None:
    """The choice equal to ``name`` up to case, else ``None``."""
    folded = {c.lower(): c for c in choices}
    return folded.get(name.lower())


def unknown_choice(option: str, name: str, choices: Sequence[str], what: str) -> NoReturn:
    """Fail with ``OPTION: expected WHAT, got NAME; did you mean X?`` (the nearest choices by
    :func:`difflib.get_close_matches`, compared without case)."""
    folded = {c.lower(): c for c in choices}
    near = [folded[c] for c in difflib.get_close_matches(name.lower(), folded, n=3, cutoff=0.6)]
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    fail(f"{option}: expected {what}, got {name!r}{hint}")


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


def check_out_usable(out: str) -> None:
    """Exit with a one-line error unless ``out`` is a writable directory or can be created as
    one, leaving nothing behind: call it before any estimate or work that reads ``--out``.

    The test is made, not guessed from permission bits (``os.access`` says yes for root under
    ``/proc``): a temporary directory is created, and removed at once, in ``out`` or, when
    ``out`` does not exist yet, in its nearest existing ancestor, which must be a directory.
    """
    if not out.strip():
        fail(f"--out: expected a directory path, got {out!r}")
    path = os.path.abspath(out)
    if os.path.lexists(path) and not os.path.isdir(path):
        fail(f"--out: {out!r} exists and is not a directory")
    base = path
    while not os.path.lexists(base):
        base = os.path.dirname(base)
    if not os.path.isdir(base):
        fail(f"--out: cannot create directory {out!r}: {base!r} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hyperx-probe-", dir=base))
    except OSError as err:
        what = (f"directory {out!r} is not writable" if base == path
                else f"cannot create directory {out!r}")
        fail(f"--out: {what}: {err.strerror or err}")


def check_out_path(out: str) -> None:
    """Exit with a one-line error unless ``out`` is a writable directory, creating it if needed
    (:func:`check_out_usable`; the run rules are :class:`hyperx.commands._rundir.RunDirectory`'s).
    """
    check_out_usable(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        fail(f"--out: cannot create directory {out!r}: {err.strerror or err}")
