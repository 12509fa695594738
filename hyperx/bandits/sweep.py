"""``hyperx bandit``: a regret sweep of several learners on one bandit game, many seeds.

Example::

    hyperx bandit --env linear --dim 20 --arms 100 --steps 500 --seeds 64 \\
        --agents exact_ts,linucb,ensemble_pp:M=16,index=sphere --out runs/linear

``--env`` is ``linear`` (alias of ``russo``, Russo & Van Roy's finite-arm game) or any name of
:func:`hyperx.envs.bandits.make_bandit_env`; ``--dim`` and ``--arms`` go to the game (each
game's defaults when omitted). ``--agents`` is a comma-separated list of
``NAME[:KEY=VALUE,...]`` (names and options: :mod:`hyperx.bandits.registry`); the same name may
appear with different options. ``--update-every B`` gives batched / delayed feedback. Every
agent runs all seeds in one compiled, vmapped ``lax.scan`` (:func:`hyperx.experiment.run_bandit`)
with common random numbers: seed s draws the same game instance for every agent.

Writes to ``--out``:

- ``regret.csv``: tidy rows ``agent, config, seed, t, regret`` (cumulative expected regret after
  t rounds, at about ``--points`` log-spaced t ending at the horizon);
- ``summary.json``: the run's settings and, per agent, the final regret's mean, standard
  deviation and 95% interval (mean +- 1.96 sd / sqrt(seeds)), compile and run wall time,
  rounds per second and seed-rounds per second, and the config;
- ``regret.png``: mean cumulative regret with the 95% band against t, one line per agent.

Bad arguments print one line ``hyperx: error: ...`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._argparse import OneLineParser, fail, positive_int
from hyperx.bandits.base import BanditSpec
from hyperx.bandits.registry import LEARNERS, make_learner, parse_agent, split_agents

ENV_ALIASES = {"linear": "russo"}
CSV_COLUMNS = ("agent", "config", "seed", "t", "regret")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hyperx bandit`` options to ``parser``."""
    from hyperx.envs.bandits import bandit_env_names

    envs = ", ".join(["linear", *bandit_env_names()])
    parser.add_argument("--env", default="linear", help=f"game: {envs}")
    parser.add_argument("--dim", type=int, default=None, help="feature dimension d")
    parser.add_argument("--arms", type=int, default=None, help="arms per round K (>= 2)")
    parser.add_argument("--steps", type=positive_int, default=500, help="horizon T")
    parser.add_argument("--seeds", type=positive_int, default=64, help="seeds per agent")
    parser.add_argument("--seed", type=int, default=0, help="base seed")
    parser.add_argument("--agents", default="exact_ts,linucb,ensemble_pp",
                        help="NAME[:KEY=VALUE,...] list; names: " + ", ".join(LEARNERS))
    parser.add_argument("--update-every", type=positive_int, default=1,
                        help="B: batched / delayed feedback every B rounds")
    parser.add_argument("--points", type=positive_int, default=50,
                        help="about this many log-spaced checkpoints t")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or table")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``bandit`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    parser = subparsers.add_parser(
        "bandit", help="regret sweep of bandit learners over many seeds",
        description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hyperx bandit`` with ``argv`` (the arguments after ``bandit``)."""
    parser = OneLineParser(prog="hyperx bandit", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def _make_env(args: argparse.Namespace):
    from hyperx.envs.bandits import bandit_env_names, make_bandit_env

    name = ENV_ALIASES.get(args.env, args.env)
    if name not in bandit_env_names():
        fail(f"--env: expected one of {['linear', *bandit_env_names()]}, got {args.env!r}")
    if args.arms is not None and args.arms < 2:
        fail(f"--arms: expected >= 2 arms, got {args.arms}")
    if args.dim is not None and args.dim <= 0:
        fail(f"--dim: expected a positive integer, got {args.dim}")
    kwargs = {k: v for k, v in (("dim", args.dim), ("num_arms", args.arms)) if v is not None}
    try:
        return make_bandit_env(name, **kwargs)
    except TypeError:
        fail(f"--env {args.env}: does not take {' or '.join('--' + k for k in kwargs)}"
             .replace("--num_arms", "--arms"))
    except ValueError as err:
        fail(f"--env {args.env}: {err}")


def _build_agents(text: str, spec: BanditSpec) -> list[tuple[str, str, dict[str, Any], Any]]:
    agents = []
    for item in split_agents(text):
        try:
            name, options = parse_agent(item)
            learner = make_learner(name, spec, options)
        except (ValueError, TypeError) as err:
            fail(f"--agents: {err}")
        config = ",".join(f"{k}={v}" for k, v in options.items())
        agents.append((name, config, options, learner))
    if not agents:
        fail("--agents: expected at least one agent")
    labels = [f"{n}:{c}" if c else n for n, c, _, _ in agents]
    if len(set(labels)) != len(labels):
        fail(f"--agents: an agent is listed twice: {labels}")
    return agents


def _interval(final: np.ndarray) -> dict[str, Any]:
    mean = float(np.mean(final))
    if final.size < 2:
        return {"mean": mean, "sd": None, "ci95": None}
    sd = float(np.std(final, ddof=1))
    half = 1.96 * sd / math.sqrt(final.size)
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half]}


def run_from_args(args: argparse.Namespace) -> int:
    """Run the sweep described by parsed ``args`` and write the outputs (module docstring)."""
    from hyperx.experiment import log_grid, run_bandit

    env = _make_env(args)
    spec = BanditSpec.from_env(env, args.steps)
    agents = _build_agents(args.agents, spec)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = log_grid(args.steps, args.points)

    rows: list[tuple[Any, ...]] = []
    summary: dict[str, Any] = {
        "env": args.env, "env_name": env.name, "dim": env.context_dim, "arms": env.num_arms,
        "fixed_arms": env.fixed_arms, "steps": args.steps, "seeds": args.seeds,
        "seed": args.seed, "update_every": args.update_every, "agents": {},
    }
    curves: dict[str, np.ndarray] = {}
    for name, config, options, learner in _progress(agents, args.quiet):
        start = time.perf_counter()
        result = run_bandit(env, learner, horizon=args.steps, num_seeds=args.seeds,
                            seed=args.seed, update_every=args.update_every,
                            checkpoints=checkpoints)
        elapsed = time.perf_counter() - start
        label = f"{name}:{config}" if config else name
        curves[label] = result.regret
        for s, c in np.ndindex(result.regret.shape):
            rows.append((name, config, s, int(result.t[c]), float(result.regret[s, c])))
        summary["agents"][label] = {
            "agent": name, "config": options, "final_regret": _interval(result.final_regret),
            "wall_time_s": elapsed, "compile_time_s": result.compile_time_s,
            "run_time_s": result.wall_time_s, "steps_per_s": result.steps_per_s,
            "seed_steps_per_s": result.run_steps_per_s, "group_size": result.group_size,
        }

    with open(out / "regret.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_regret(checkpoints, curves, out / "regret.png",
                title=f"{env.name}: d={env.context_dim}, K={env.num_arms}, {args.seeds} seeds")
    if not args.quiet:
        print(format_table(summary))
        print(f"wrote {out}/regret.csv, summary.json, regret.png")
    return 0


def _progress(agents: list, quiet: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return agents
    return tqdm(agents, desc="agents", disable=quiet, file=sys.stderr)


def format_table(summary: dict[str, Any]) -> str:
    """The summary as a fixed-width text table, one line per agent."""
    lines = [f"{'agent':<32} {'final regret (95% CI)':>28} {'wall s':>8} {'seed-steps/s':>13}"]
    for label, entry in summary["agents"].items():
        final = entry["final_regret"]
        ci = final["ci95"]
        band = f"{final['mean']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")
        lines.append(f"{label:<32} {band:>28} {entry['wall_time_s']:>8.2f} "
                     f"{entry['seed_steps_per_s']:>13.3g}")
    return "\n".join(lines)


def plot_regret(t: np.ndarray, curves: dict[str, np.ndarray], path: Path, *,
                title: str = "") -> None:
    """Mean cumulative regret with a 95% band (mean +- 1.96 se) vs t, one line per agent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, regret in curves.items():
        mean = regret.mean(axis=0)
        half = (1.96 * regret.std(axis=0, ddof=1) / math.sqrt(regret.shape[0])
                if regret.shape[0] > 1 else np.zeros_like(mean))
        ax.plot(t, mean, label=label)
        ax.fill_between(t, mean - half, mean + half, alpha=0.25)
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative expected regret")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
