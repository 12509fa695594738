"""``hyperx plot DIR``: redraw the plot of a run from the CSV in its folder.

The folder's files say which command made it: ``regret.csv`` (``hyperx bandit``, or
``hyperx games`` by its columns) gives ``regret.png``, ``returns.csv`` (``hyperx deepsea``)
``deepsea.png``, ``episodes.csv`` with ``evaluations.csv`` (``hyperx atari``) ``returns.png``,
and ``metrics.csv`` (``hyperx llm``) ``curves.png``.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from hyperx.commands._args import fail
from hyperx.commands._dryrun import add_dry_run_option


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    plot = subparsers.add_parser("plot", help="redraw a run's plot from its CSV",
                                 description="Redraw the plot of a run in DIR from the CSV "
                                             "there: regret.png (hyperx bandit, hyperx games), "
                                             "deepsea.png (hyperx deepsea), returns.png (hyperx "
                                             "atari) or curves.png (hyperx llm).")
    plot.add_argument("dir", metavar="DIR", help="output directory of a hyperx run")
    add_dry_run_option(plot)
    plot.set_defaults(func=run_from_args)
    return plot


def run_from_args(args: argparse.Namespace) -> int:
    """Redraw the plot of the run in ``args.dir`` (module docstring)."""
    from hyperx.commands.atari import plot_atari_csv
    from hyperx.commands.bandit import plot_regret_csv
    from hyperx.commands.deepsea import plot_returns_csv
    from hyperx.commands.games import is_games_csv, plot_games_csv
    from hyperx.commands.llm import plot_metrics_csv

    directory = args.dir
    regret = os.path.join(directory, "regret.csv")

    def holds(name: str) -> bool:
        return os.path.isfile(os.path.join(directory, name))

    try:
        if holds("regret.csv") and is_games_csv(Path(regret)):
            plotter, name = plot_games_csv, "regret.png"
        elif holds("regret.csv"):
            plotter, name = plot_regret_csv, "regret.png"
        elif holds("returns.csv"):
            plotter, name = plot_returns_csv, "deepsea.png"
        elif holds("episodes.csv") and holds("evaluations.csv"):
            plotter, name = plot_atari_csv, "returns.png"
        elif holds("metrics.csv"):
            plotter, name = plot_metrics_csv, "curves.png"
        else:
            fail(f"DIR: {directory!r} holds no run to plot: regret.csv (hyperx bandit, hyperx "
                 "games), returns.csv (hyperx deepsea), episodes.csv and evaluations.csv "
                 "(hyperx atari) or metrics.csv (hyperx llm)")
        if args.dry_run:
            print(f"hyperx plot --dry-run: would write {os.path.join(directory, name)}")
            return 0
        path = plotter(directory)
    except (ValueError, UnicodeDecodeError, csv.Error) as err:
        fail(f"DIR: {err}")
    print(f"wrote {path}")
    return 0
