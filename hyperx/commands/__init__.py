"""The ``hyperx`` console script: one module per command, on one run-directory lifecycle.

``hyperx demo`` runs the library's main jobs on embedded defaults and prints what it found;
``hyperx bandit`` runs a regret sweep of bandit learners over many seeds;
``hyperx deepsea`` trains a value-based agent on DeepSea and writes returns, summary and plot;
``hyperx atari`` trains a value-based agent on an Atari game (envpool or ale-py);
``hyperx llm`` runs RL on a small causal LM under a training-inference mismatch;
``hyperx games`` plays repeated games between no-regret learners (GP-MW, Exp3, Hedge);
``hyperx plot DIR`` redraws the plot of a run from its CSV.

Every command that trains follows :class:`hyperx.commands._rundir.RunDirectory` (``--out``
checked before any work, ``run.json``, ``--resume`` / ``--overwrite``, the finished-run
message, Ctrl-C with exit status 130) and runs its work through :func:`hyperx.loop.run_chunks`.
Argument errors print one line (``hyperx: error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence

import hyperx
from hyperx._host import installed_version
from hyperx.commands import atari, bandit, deepsea, demo, games, llm, plot
from hyperx.commands._args import OneLineParser

DESCRIPTION = ("hyperx: JAX-native exploration under uncertainty. Run a subcommand with --help "
               "for its options.")
COMMANDS = (demo, plot, deepsea, bandit, llm, atari, games)
"""The command modules, each with ``register(subparsers)``, in the order of ``--help``."""


def version_line() -> str:
    """``hyperx 0.1.0 (Python 3.11.7, jax 0.10.2, jaxlib 0.10.2)``: what ``--version`` prints,
    read from the installed distributions (without importing jax)."""
    jax, jaxlib = (installed_version(name) or "not installed" for name in ("jax", "jaxlib"))
    return (f"hyperx {hyperx.__version__} (Python {platform.python_version()}, "
            f"jax {jax}, jaxlib {jaxlib})")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hyperx`` command (exposed for tests and docs)."""
    parser = OneLineParser(prog="hyperx", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``hyperx`` command line; returns the exit status (errors and Ctrl-C inside a
    command's work raise ``SystemExit`` with 2 or 130 after their one line)."""
    args = build_parser().parse_args(argv)
    return args.func(args)


def console() -> None:
    """The ``hyperx`` console script (and ``python -m hyperx``): :func:`main`, where Ctrl-C at
    any moment exits with status 130 after one line.

    After Ctrl-C the process ends at once (``os._exit``), without finalizing the interpreter:
    a Ctrl-C during an XLA compilation stops the main thread while XLA's own threads go on
    compiling, and finalizing the interpreter under them crashed with SIGSEGV (exit 139) where
    130 is promised. Every command has closed its files, checkpoints and trackers by then.
    """
    try:
        status = main()
    except KeyboardInterrupt:  # before a command's work began (parsing, checks, imports)
        sys.stderr.write("\nhyperx: interrupted: before the run's work began; rerun the same "
                         "command to start it\n")
        status = 130
    except SystemExit as stop:
        if stop.code != 130:
            raise
        status = 130
    if status == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    raise SystemExit(status)
