"""``--dry-run``: what a command would do, without doing it.

A command given ``--dry-run`` validates every option exactly as a real run does (the same
one-line errors, the run-directory rules of :func:`hyperx.commands._rundir.check_out_rules`, every
memory check, recorded by :func:`hyperx._validation.memory_estimates`), then prints a plan and
exits with status 0: the device it would run on, the memory estimates against what is
available, a rough time, and the files it would write. Nothing is compiled, no folder is
created and no file is written.

The time is a rough guide from the rates the benchmarks measured on a 2-core CPU (AMD EPYC,
jax 0.10.2; each rate below names its file in ``benchmarks/results``), at the defaults those
benchmarks ran; other learners, sizes and devices differ, and compilation comes on top.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NamedTuple

from hyperx._host import device_line, environment
from hyperx._validation import MemoryEstimate, format_bytes, plural

SHOWN = 3
"""The memory estimates a plan lists, largest fraction of what is available first."""


class WorkEstimate(NamedTuple):
    """``amount`` units of work at ``rate`` units per second (``None``: no measured rate),
    the rate's ``source``, and the compile time ``compile_s`` on top."""

    amount: float
    unit: str
    rate: float | None
    source: str
    compile_s: float = 0.0


def add_dry_run_option(parser: argparse.ArgumentParser) -> None:
    """``--dry-run`` for a command that computes or writes."""
    parser.add_argument("--dry-run", action="store_true",
                        help="check every option, estimate memory and time, list the files "
                             "it would write, and exit without computing")


def format_seconds(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.4 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def plan(command: str, *, out: str | None, outputs: Sequence[str],
         memory: Sequence[MemoryEstimate], work: Sequence[WorkEstimate],
         resume: bool = False) -> str:
    """The text ``--dry-run`` prints (module docstring)."""
    env = environment()
    lines = [f"hyperx {command} --dry-run: every option is valid; nothing was computed or "
             "written.", "  " + device_line(f"hyperx {command}", env)]
    if memory:
        ranked = sorted(memory, key=lambda m: m.nbytes / max(m.available, 1.0), reverse=True)
        first = ranked[0]
        lines.append(f"  memory: {first.name}: about {format_bytes(first.nbytes)} of "
                     f"{first.what} ({format_bytes(first.available)} available)")
        lines += [f"          {m.name}: about {format_bytes(m.nbytes)} of {m.what}"
                  for m in ranked[1:SHOWN]]
        if len(ranked) > SHOWN:
            lines.append(f"          and {plural(len(ranked) - SHOWN, 'smaller estimate')}")
    for w in work:
        amount = plural(round(w.amount), w.unit, fmt=",")
        if w.rate:
            lines.append(f"  time: about {format_seconds(w.amount / w.rate + w.compile_s)} for "
                         f"{amount} at {w.rate:,.0f} {w.unit}s/s ({w.source})"
                         + (f", compilation (~{format_seconds(w.compile_s)}) included"
                            if w.compile_s else ""))
        else:
            lines.append(f"  time: {amount}, no measured rate ({w.source})")
    if env["backend"] != "cpu" and work:
        lines.append(f"  (the rates are a 2-core CPU's; this run is on {env['backend']})")
    if out is not None:
        verb = "continue in" if resume else "write to"
        lines.append(f"  would {verb} {out}/: {', '.join(outputs)}, run.json")
    return "\n".join(lines)


def report(command: str, **kwargs) -> int:
    """Print :func:`plan` on stdout and return the exit status 0."""
    sys.stdout.write(plan(command, **kwargs) + "\n")
    return 0
