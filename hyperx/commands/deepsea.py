"""``hyperx deepsea``: train a value-based agent on DeepSea(N) for many vmapped seeds.

Outputs in ``--out``: ``returns.csv`` (seed, episode, return, bad; appended chunk by chunk by
:class:`ReturnsWriter`, rows in episode order), ``summary.json`` (both "learned" criteria,
:mod:`hyperx.agents.deepsea_summary`), ``deepsea.png`` (running mean of the last 100 returns
per seed), ``checkpoints/`` with ``--checkpoint`` (continued by ``--resume``), ``tb/`` and,
with ``--track``, ``wandb/``. ``--eval-only`` plays greedy episodes of the saved agent and
writes ``eval_only.json``.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hyperx._validation import memory_estimates, plural
from hyperx.commands._args import fail, failing, non_negative_int, positive_int
from hyperx.commands._dryrun import WorkEstimate, report
from hyperx.commands._plots import figure
from hyperx.commands._rundir import (
    RunDirectory,
    add_run_options,
    read_summary,
    saved_run,
    write_summary_json,
)

if TYPE_CHECKING:
    from hyperx.agents.deepsea import DeepSeaResult

OUTPUTS = ("returns.csv", "summary.json", "deepsea.png", "tb", "wandb", "checkpoints")
SETTINGS = ("size", "agent", "seeds", "episodes", "seed", "mapping_seed", "per_seed_mappings",
            "chunk_steps", "checkpoint")
"""The options that define a run (``run.json``'s settings; a resumed run must match them)."""
RATE = 2_800
"""Env steps per second summed over seeds of HyperAgent on DeepSea(10) with 8 to 64 seeds in
one program, on the 2-core CPU (``benchmarks/results/deepsea_throughput.json``)."""


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``deepsea`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    from hyperx.agents.config import AGENT_NAMES

    deep = subparsers.add_parser(
        "deepsea", help="train a value-based agent on DeepSea for many seeds",
        description="Train a value-based agent on DeepSea(N) for many vmapped seeds; writes "
                    "returns.csv (chunk by chunk), summary.json and deepsea.png to --out.")
    deep.add_argument("--size", type=positive_int, default=20, help="DeepSea size N")
    deep.add_argument("--agent", choices=AGENT_NAMES, default="hyperagent", help="agent config")
    deep.add_argument("--seeds", type=positive_int, default=5, help="vmapped seeds")
    deep.add_argument("--episodes", type=positive_int, default=2000, help="episodes per seed")
    deep.add_argument("--seed", type=non_negative_int, default=0, help="base seed")
    deep.add_argument("--mapping-seed", type=non_negative_int, default=42,
                      help="bsuite action-mapping seed (>= 0)")
    deep.add_argument("--per-seed-mappings", action="store_true",
                      help="seed s uses mapping seed MAPPING_SEED + s")
    deep.add_argument("--chunk-steps", type=positive_int, help="env steps per compiled chunk")
    deep.add_argument("--checkpoint", action="store_true",
                      help="checkpoint to OUT/checkpoints after each chunk (--resume continues)")
    add_run_options(deep)
    deep.add_argument("--eval-only", action="store_true",
                      help="instead of training, play greedy episodes with the newest intact "
                           "checkpoint of the run in --out (the settings in its run.json); "
                           "writes OUT/eval_only.json")
    deep.add_argument("--eval-episodes", type=positive_int, default=10,
                      help="with --eval-only: greedy episodes per seed")
    deep.set_defaults(func=run_from_args)
    return deep


def run_from_args(args: argparse.Namespace) -> int:
    """Train, writing the outputs (module docstring), or continue a run with ``--resume``."""
    from hyperx.agents.deepsea import train_deepsea
    from hyperx.agents.deepsea_summary import describe
    from hyperx.loop import Chunk

    if args.eval_only:
        return _eval_only(args)
    with memory_estimates() as memory:
        config, program = check_args(args)
    settings = {key: getattr(args, key) for key in SETTINGS}
    run = RunDirectory(args, "deepsea", settings, OUTPUTS,
                       extent=f"all {args.episodes} episodes", checkpointed=args.checkpoint)
    if args.dry_run:
        return run.dry_run(memory=memory, work=[WorkEstimate(
            args.size * args.episodes * args.seeds, "env step", RATE, "hyperagent on "
            "DeepSea(10), 8 to 64 seeds, benchmarks/results/deepsea_throughput.json", 5.0)])
    if not run.open():
        return 0
    out = run.out
    mapping = (list(range(args.mapping_seed, args.mapping_seed + args.seeds))
               if args.per_seed_mappings else args.mapping_seed)
    writer = ReturnsWriter(out / "returns.csv")
    tracker = run.tracker()

    def log_chunk(chunk: Chunk) -> None:
        first, episodes = writer.written or 0, chunk.done // args.size
        writer(chunk.carry.seeds.returns, chunk.carry.seeds.bad, episodes)
        if episodes > first:
            block = np.asarray(chunk.carry.seeds.returns[:, first:episodes])
            bad = np.asarray(chunk.carry.seeds.bad[:, first:episodes])
            tracker.log({"return_mean": block.mean(), "bad_fraction": bad.mean(),
                         **{f"seed{s}/return": block[s].mean() for s in range(args.seeds)}},
                        chunk.done)
            tracker.flush()

    def stopped(stop: KeyboardInterrupt) -> str:
        return run.stopped(stop, unit="env step",
                           kept=f"the finished episodes are in {out / 'returns.csv'}")

    with run.guard(stopped=stopped):
        try:
            result = train_deepsea(
                config, args.size, args.episodes, num_seeds=args.seeds, seed=args.seed,
                mapping_seeds=mapping, chunk_steps=args.chunk_steps,
                checkpoint_dir=str(out / "checkpoints") if args.checkpoint else None,
                progress=not args.quiet, program=program, on_chunk=log_chunk)
        finally:
            tracker.close()
    summary = write_outputs(result, str(out), agent=args.agent, size=args.size,
                            returns=writer.written is None)
    run.finish()
    if result.steps_at_start == result.steps_done:
        run.say_complete(f"rebuilt summary.json and deepsea.png; {describe(summary)}")
        return 0
    rate = result.env_steps_per_s
    print(f"{args.agent} on DeepSea({args.size}), {plural(args.seeds, 'seed')}: "
          f"{describe(summary)}; {rate:.0f} env steps/s summed over "
          f"{plural(args.seeds, 'seed')} ({rate / args.seeds:.0f} per seed, the bar's unit); "
          f"wrote {out}")
    return 0


def _eval_only(args: argparse.Namespace) -> int:
    """``--eval-only``: greedy episodes of the saved agent of the run in ``--out``, under
    that run's settings (:func:`hyperx.agents.deepsea.evaluate_saved`); writes
    ``eval_only.json``."""
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import evaluate_saved

    out, run = Path(args.out), saved_run(args, "deepsea")
    if args.dry_run:
        return report("deepsea", out=args.out, outputs=["eval_only.json"], memory=[],
                      resume=True, work=[WorkEstimate(run.seeds * args.eval_episodes,
                                                      "evaluation episode", None,
                                                      f"{run.size} steps each")])
    mapping = (list(range(run.mapping_seed, run.mapping_seed + run.seeds))
               if run.per_seed_mappings else run.mapping_seed)
    with failing("--eval-only: "):
        saved = evaluate_saved(str(out / "checkpoints"), get_config(run.agent), run.size,
                               run.episodes, num_seeds=run.seeds, seed=run.seed,
                               mapping_seeds=mapping, chunk_steps=run.chunk_steps,
                               episodes=args.eval_episodes)
    found = saved.treasure.mean(axis=1)
    result = {"env_step": saved.env_step, "protocol": saved.protocol,
              "treasure_fraction_per_seed": found.tolist(),
              "return_mean_per_seed": saved.returns.mean(axis=1).tolist(),
              "returns": saved.returns.tolist()}
    write_summary_json(out, result, "eval_only.json")
    print(f"{run.agent} on DeepSea({run.size}), the checkpoint of env step {saved.env_step}: "
          f"{plural(int((found > 0).sum()), 'seed')} of {run.seeds} reach the treasure, in "
          f"{found.mean():.0%} of {plural(args.eval_episodes, 'greedy episode')} per seed; "
          f"wrote {out / 'eval_only.json'}")
    return 0


def check_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """What :func:`run_from_args` checks before it touches ``--out`` (mapping seeds, the sizes
    of the program and of the seeds' carry); returns the agent config and its program."""
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import check_carry_memory, make_program
    from hyperx.envs.deepsea import MAX_MAPPING_SEED

    last = args.mapping_seed + (args.seeds - 1 if args.per_seed_mappings else 0)
    if last > MAX_MAPPING_SEED:
        fail(f"--mapping-seed: expected mapping seeds in [0, {MAX_MAPPING_SEED}], got "
             f"{args.mapping_seed} .. {last}")
    config = get_config(args.agent)
    with failing(f"--size {args.size}, --episodes {args.episodes}, --seeds {args.seeds}: "):
        program = make_program(config, args.size, args.episodes, args.chunk_steps)
        check_carry_memory(program, args.seeds)
    return config, program


class ReturnsWriter:
    """Appends the episodes finished since the last call to ``returns.csv`` (seed, episode,
    return, bad; rows in episode order, seeds within an episode), so a run's returns are on
    disk chunk by chunk and never held as rows in memory.

    The first call rewrites the file from episode 1 (a resumed run's carry holds every episode
    so far); later calls append and flush.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.written = None

    def __call__(self, returns: Any, bad: Any, episodes: int) -> None:
        """Write episodes ``written+1 .. episodes`` of the (S, E) ``returns`` / ``bad``."""
        first = 0 if self.written is None else self.written
        if episodes <= first and self.written is not None:
            return
        block = np.asarray(returns[:, first:episodes])
        flags = np.asarray(bad[:, first:episodes])
        mode = "w" if self.written is None else "a"
        with open(self.path, mode, newline="") as f:
            writer = csv.writer(f)
            if mode == "w":
                writer.writerow(["seed", "episode", "return", "bad"])
            writer.writerows([s, first + e + 1, f"{block[s, e]:.6g}", int(flags[s, e])]
                             for e in range(block.shape[1]) for s in range(block.shape[0]))
            f.flush()
            os.fsync(f.fileno())
        self.written = episodes


def write_outputs(result: DeepSeaResult, out: str, *, agent: str, size: int,
                  returns: bool = True) -> dict[str, Any]:
    """Write ``returns.csv`` (unless ``returns=False``: already written by a
    :class:`ReturnsWriter`), ``summary.json`` and ``deepsea.png`` (running mean of the last
    100 returns per seed) to ``out``."""
    from hyperx.agents.deepsea_summary import summarise

    os.makedirs(out, exist_ok=True)
    if returns:
        ReturnsWriter(os.path.join(out, "returns.csv"))(result.returns, result.bad,
                                                        result.returns.shape[1])
    summary = summarise(result, agent=agent, size=size)
    write_summary_json(Path(out), summary)
    plot_returns(result.returns, os.path.join(out, "deepsea.png"), f"{agent} on DeepSea({size})")
    return summary


def read_returns(path: str | Path) -> np.ndarray:
    """The (S, E) returns of a ``returns.csv`` (rows in any order).

    Raises ``ValueError`` naming the file when it is not such a table: a missing or wrong
    header, a row that is not three numbers, no rows, or seed and episode ids that do not fit
    the rows (an id far beyond the row count would allocate a table of that size).
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    header = lines[0].strip().split(",") if lines else []
    if header[:3] != ["seed", "episode", "return"]:
        raise ValueError(f"{path}: expected the header seed,episode,return, got {header}")
    rows = [line for line in lines[1:] if line.strip()]
    if not rows:
        raise ValueError(f"{path}: expected rows of seed, episode, return; found none")
    try:
        table = np.loadtxt(rows, delimiter=",", ndmin=2)
    except ValueError as err:
        raise ValueError(f"{path}: a row is not numbers ({err})") from None
    if table.shape[1] < 3:
        raise ValueError(f"{path}: expected rows of seed, episode, return; found none")
    seeds, episodes = table[:, 0], table[:, 1]
    if (np.any(seeds < 0) or np.any(episodes < 1) or np.any(seeds % 1) or np.any(episodes % 1)
            or not np.all(np.isfinite(table[:, :2]))):
        raise ValueError(f"{path}: seeds must be integers >= 0 and episodes integers >= 1")
    cells = (seeds.max() + 1) * episodes.max()
    if cells > 4 * len(table) + 1000:
        raise ValueError(f"{path}: {len(table)} rows name seeds up to {int(seeds.max())} and "
                         f"episodes up to {int(episodes.max())}: not one run's table")
    returns = np.full((int(seeds.max()) + 1, int(episodes.max())), np.nan)
    returns[seeds.astype(int), episodes.astype(int) - 1] = table[:, 2]
    return returns


def plot_returns_csv(directory: str | Path) -> Path:
    """Redraw ``deepsea.png`` in ``directory`` from its ``returns.csv``; returns the path."""
    directory = Path(directory)
    meta = read_summary(directory / "summary.json")
    title = ("DeepSea" if meta is None
             else f"{meta.get('agent', '?')} on DeepSea({meta.get('size', '?')})")
    path = directory / "deepsea.png"
    plot_returns(read_returns(directory / "returns.csv"), str(path), title)
    return path


def plot_returns(returns: np.ndarray, path: str, title: str) -> None:
    """Running mean of the last 100 returns per seed against the episode, with 0.9 x 0.99."""
    from hyperx.agents.deepsea_summary import running_mean

    with figure(path, dpi=100, figsize=(6, 4)) as (_, ax):
        episodes = np.arange(1, returns.shape[1] + 1)
        for s, curve in enumerate(running_mean(returns)):
            ax.plot(episodes, curve, lw=1, label=f"seed {s}")
        ax.axhline(0.9 * 0.99, color="k", ls=":", lw=1, label="0.9 x 0.99")
        ax.set(xlabel="episode", ylabel="mean return (last 100 episodes)", title=title)
        if returns.shape[0] <= 10:
            ax.legend(fontsize=7)
