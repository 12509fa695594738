"""``hyperx bandit``: a regret sweep of several learners on one bandit game, many seeds.

Example::

    hyperx bandit --env linear --dim 20 --arms 100 --steps 500 --seeds 64 \\
        --agents exact_ts,linucb,ensemble_pp:M=16,index=sphere --out runs/linear

``--env`` is ``linear`` (alias of ``russo``, Russo & Van Roy's finite-arm game) or any name of
:func:`hyperx.envs.bandits.make_bandit_env`; ``--dim`` and ``--arms`` go to the game (each
game's defaults when omitted). ``--env text`` (the text-feature bandit) needs ``--data`` (a
CSV file or a ``datasets`` folder) and ``--model`` (a Flax causal LM folder or cached hub name);
its features are cached in the default folder (:mod:`hyperx.envs.text_bandit`). ``--agents``
is a comma-separated list of ``NAME[:KEY=VALUE,...]`` (names and options:
:mod:`hyperx.bandits.registry`, or ``hyperx bandit --list-agents``); the same name may appear
with different options.
``--update-every B`` gives batched / delayed feedback. Every agent runs all seeds in compiled,
vmapped ``lax.scan`` calls (:func:`hyperx.bandits.runner.run_bandit`) with common random numbers:
seed s draws the same game instance for every agent.

Writes to ``--out`` (checked before any work, see :mod:`hyperx.commands._rundir`):

- ``parts/``: one CSV per agent and block of ``--seeds-per-part`` seeds, each written as soon
  as it is computed; ``--resume`` skips the parts already there;
- ``regret.csv``: tidy rows ``agent, config, seed, t, regret`` (cumulative expected regret after
  t rounds, at about ``--points`` log-spaced t ending at the horizon), joined from the parts;
- ``summary.json``: the run's settings and, per agent, the final regret's mean, standard
  deviation and 95% interval (mean +- 1.96 sd / sqrt(seeds)), compile and run wall time,
  rounds per second and seed-rounds per second, and the config;
- ``regret.png``: mean cumulative regret with the 95% band against t, one line per agent.

The summary and plot are rebuilt from what is on disk. Bad arguments print one line
``hyperx: error: ...`` on stderr and exit with status 2; Ctrl-C stops after writing the
finished parts and says how to resume (exit status 130).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._validation import INT32_MAX, check_memory, host_memory_bytes, memory_estimates
from hyperx.bandits.base import BanditSpec
from hyperx.bandits.registry import (
    LEARNERS,
    describe_learners,
    make_learner,
    parse_agent,
    split_agents,
)
from hyperx.commands._args import check_out_usable, fail, failing, non_negative_int, positive_int
from hyperx.commands._dryrun import WorkEstimate
from hyperx.commands._parts import Block, Parts, add_parts_options, log_checkpoints
from hyperx.commands._plots import plot_bands
from hyperx.commands._rundir import RunDirectory, format_interval, interval95, write_summary_json
from hyperx.commands._tracking import log_curves

ENV_ALIASES = {"linear": "russo"}
CSV_COLUMNS = ("agent", "config", "seed", "t", "regret")
TIMING_KEYS = ("wall_time_s", "compile_time_s", "run_time_s", "seed_rounds", "group_size")
"""The timings each part's JSON holds (summed over parts; ``group_size``: the largest)."""
OUTPUTS = ("parts", "regret.csv", "summary.json", "regret.png", "tb", "wandb")
SETTINGS = ("env", "dim", "arms", "steps", "seeds", "seed", "agents", "update_every", "points",
            "seeds_per_part")
CSV_ROW_BYTES = 48
"""Upper estimate of one ``regret.csv`` row's size, for the disk-space check."""

DESCRIPTION = ("Regret sweep of bandit learners on one game over many seeds: writes "
               "regret.csv, summary.json and regret.png to --out.")


class _ListAgents(argparse.Action):
    """``--list-agents``: print every learner with its options and defaults, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(describe_learners())
        parser.exit()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hyperx bandit`` options to ``parser``."""
    from hyperx.envs.bandits import bandit_env_names

    parser.add_argument("--env", choices=("linear", *bandit_env_names()), default="linear",
                        help="game (linear: Russo and Van Roy's linear-Gaussian game)")
    parser.add_argument("--dim", type=positive_int,
                        help="feature dimension d (default: the game's)")
    parser.add_argument("--arms", type=positive_int,
                        help="arms per round K >= 2 (default: the game's)")
    parser.add_argument("--data",
                        help="--env text: a CSV file or a datasets folder of texts and labels")
    parser.add_argument("--model",
                        help="--env text: a transformers Flax causal LM folder or cached hub name")
    parser.add_argument("--steps", type=positive_int, default=500, help="horizon T")
    parser.add_argument("--seeds", type=positive_int, default=64, help="seeds per agent")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="base seed")
    parser.add_argument("--agents", default="exact_ts,linucb,ensemble_pp",
                        help="NAME[:KEY=VALUE,...] list (see --list-agents); names: "
                             + ", ".join(LEARNERS))
    parser.add_argument("--list-agents", action=_ListAgents,
                        help="list every agent with its options and defaults, and exit")
    parser.add_argument("--update-every", type=positive_int, default=1,
                        help="B: batched / delayed feedback every B rounds (B < T)")
    add_parts_options(parser)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``bandit`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    parser = subparsers.add_parser(
        "bandit", help="regret sweep of bandit learners over many seeds",
        description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def _make_env(args: argparse.Namespace):
    from hyperx.envs.bandits import bandit_env_names, make_bandit_env

    name = ENV_ALIASES.get(args.env, args.env)
    if name not in bandit_env_names():
        fail(f"--env: expected one of {['linear', *bandit_env_names()]}, got {args.env!r}")
    if args.arms is not None and args.arms < 2:
        fail(f"--arms: expected >= 2 arms, got {args.arms}")
    text = {k: v for k, v in (("data", args.data), ("model", args.model)) if v is not None}
    if name == "text":
        for key in ("data", "model"):
            if key not in text:
                fail(f"--{key}: --env text needs --data and --model")
    elif text:
        fail(f"--{next(iter(text))}: only --env text takes --data and --model")
    kwargs = {k: v for k, v in (("dim", args.dim), ("num_arms", args.arms)) if v is not None}
    try:
        return make_bandit_env(name, **kwargs, **text)
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


def _check_sizes(args: argparse.Namespace, num_agents: int, num_points: int) -> None:
    """Fail in one line when the outputs cannot fit (memory for the regret table, disk for
    the CSV and its parts) or the seed ids leave the int32 range, before any work."""
    if args.seed < 0 or args.seed + args.seeds > INT32_MAX:
        fail(f"--seed, --seeds: expected seed ids in [0, {INT32_MAX}], got {args.seed} .. "
             f"{args.seed + args.seeds - 1}")
    rows = num_agents * args.seeds * num_points
    disk = Path(args.out).absolute()  # checked usable: walk up to its existing folder
    while not disk.exists():
        disk = disk.parent
    with failing():
        check_memory(f"--seeds {args.seeds}", rows * 8, host_memory_bytes(),
                     f"memory for the regret table ({rows:,} values)")
        check_memory(f"--seeds {args.seeds}", rows * 2 * CSV_ROW_BYTES,
                     shutil.disk_usage(disk).free, "disk for regret.csv and its parts")


def _expected_rows(name: str, config: str, block: Block, checkpoints: np.ndarray):
    """The identifying columns of one part's rows: agent, config, seed, t."""
    _, start, stop = block
    return [(name, config, seed, int(t)) for seed in range(start, stop) for t in checkpoints]


def check_args(args: argparse.Namespace) -> tuple[Any, list[tuple[str, str, dict[str, Any],
                                                                   Any]], np.ndarray]:
    """Everything :func:`run_from_args` checks before it touches ``--out`` (one-line errors,
    exit status 2): the options, the game, the agents and every size estimate. Returns the
    game, the agents and the checkpoints."""
    from hyperx.bandits.runner import check_run_memory

    check_out_usable(args.out)  # first: the disk estimate below reads the filesystem of --out
    env = _make_env(args)
    if 1 < args.update_every >= args.steps:
        fail(f"--update-every: expected < --steps = {args.steps} (the learners would never "
             f"learn from a batch of {args.update_every} rounds), got {args.update_every}")
    spec = BanditSpec.from_env(env, args.steps)
    agents = _build_agents(args.agents, spec)
    checkpoints = log_checkpoints(args)
    _check_sizes(args, len(agents), checkpoints.size)
    for name, config, _, learner in agents:
        with failing(f"--agents {name}{':' + config if config else ''}: "):
            check_run_memory(env, learner, args.steps, args.update_every)
    return env, agents, checkpoints


LINEAR_RATE = (101_344, 50 * 1000)
"""Seed-rounds per second of exact Thompson sampling at d = 50, K = 1000 (200 seeds) on the
2-core CPU (``benchmarks/results/bandit_throughput.json``), and its d x K: a linear learner's
round reads its d x K arms, so :func:`_work` scales the rate by d K."""


def _work(args: argparse.Namespace, env: Any, num_agents: int) -> WorkEstimate:
    """The sweep's seed-rounds and a linear learner's rate at this game's d x K."""
    rate, size = LINEAR_RATE
    scaled = min(rate * size / (env.context_dim * env.num_arms), 10 * rate)
    return WorkEstimate(args.steps * args.seeds * num_agents, "seed-round", scaled,
                        f"exact TS's rate at d = 50, K = 1000 scaled to d = {env.context_dim}, "
                        f"K = {env.num_arms}; neural learners are slower", 2.0 * num_agents)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the sweep described by parsed ``args`` and write the outputs (module docstring)."""
    from hyperx.bandits.runner import BanditProgram, bandit_program, run_bandit

    with memory_estimates() as memory:
        env, agents, checkpoints = check_args(args)
    settings = {key: getattr(args, key) for key in SETTINGS}
    if args.data is not None:  # only --env text has them (older run folders lack the keys)
        settings.update(data=args.data, model=args.model)
    run = RunDirectory(args, "bandit", settings, OUTPUTS, extent="every part")
    if args.dry_run:
        return run.dry_run(memory=memory, work=[_work(args, env, len(agents))])
    run.open(rebuild=True)
    out = run.out
    parts = Parts(out, "agent", len(agents), args.seeds, args.seeds_per_part,
                  columns=CSV_COLUMNS, meta_keys=TIMING_KEYS)
    todo = parts.todo(lambda block: _expected_rows(*agents[block[0]][:2], block, checkpoints))
    programs: dict[int, BanditProgram] = {}  # one compiled program per agent, for its parts

    def play(block: Block) -> dict[str, Any]:
        i, start, stop = block
        name, config, _, learner = agents[i]
        begin = time.perf_counter()
        with failing(f"--agents {name}{':' + config if config else ''}: "):
            if i not in programs:
                programs[i] = bandit_program(env, learner, horizon=args.steps,
                                             update_every=args.update_every,
                                             checkpoints=checkpoints)
            result = run_bandit(env, learner, horizon=args.steps, num_seeds=stop - start,
                                first_seed=start, seed=args.seed,
                                update_every=args.update_every, checkpoints=checkpoints,
                                program=programs[i])
        timing = {"wall_time_s": time.perf_counter() - begin,
                  "compile_time_s": result.compile_time_s, "run_time_s": result.wall_time_s,
                  "seed_rounds": args.steps * (stop - start), "group_size": result.group_size}
        return {"result": result, "timing": timing}

    def write_part(block: Block, part: dict[str, Any]) -> None:
        name, config = agents[block[0]][:2]
        result = part["result"]
        parts.write(block, ((name, config, block[1] + s, int(result.t[c]),
                             float(result.regret[s, c]))
                            for s, c in np.ndindex(result.regret.shape)), part["timing"])

    parts.run(run, todo, play, progress=None if args.quiet else "bandit", on_part=write_part)
    summary, curves = _write_outputs(parts, args, env, agents, checkpoints)
    if todo:  # the mean regret curves, once, when the sweep ran
        log_curves(run.tracker(), "regret", checkpoints,
                   {label: c.mean(axis=0) for label, c in curves.items()})
    run.finish()
    if not args.quiet:
        print(format_table(summary))
    if not todo:
        run.say_complete("rebuilt regret.csv, summary.json and regret.png from them")
    elif not args.quiet:
        print(f"wrote {out}/regret.csv, summary.json, regret.png")
    return 0


def _copy_parts(parts: Parts, item: int, name: str, config: str, writer: Any,
                checkpoints: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """Copy one agent's parts' rows (each checked by :meth:`Parts.read`) to ``writer`` part by
    part (never all rows in memory); returns the (S, C) regret and the summed timings."""
    regret: list[np.ndarray] = []
    timing: dict[str, float] = {}
    for block in parts.of(item):
        rows, values, times = parts.read(block, _expected_rows(name, config, block, checkpoints))
        writer.writerows(rows)
        regret.append(np.reshape(values, (block[2] - block[1], checkpoints.size)))
        for key in TIMING_KEYS:
            timing[key] = (max if key == "group_size" else sum)((timing.get(key, 0), times[key]))
    return np.concatenate(regret), timing


def _write_outputs(parts: Parts, args: argparse.Namespace, env, agents: list,
                   checkpoints: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Join the parts on disk into regret.csv, summary.json and regret.png; returns the
    summary and each agent's regret (seeds, checkpoints)."""
    summary: dict[str, Any] = {
        "env": args.env, "env_name": env.name, "dim": env.context_dim, "arms": env.num_arms,
        "fixed_arms": env.fixed_arms, "steps": args.steps, "seeds": args.seeds,
        "seed": args.seed, "update_every": args.update_every, "agents": {},
    }
    curves: dict[str, np.ndarray] = {}

    def copy(writer: Any) -> None:
        for i, (name, config, options, _) in enumerate(agents):
            regret, timing = _copy_parts(parts, i, name, config, writer, checkpoints)
            label = f"{name}:{config}" if config else name
            curves[label] = regret
            run_time = timing["run_time_s"]
            summary["agents"][label] = {
                "agent": name, "config": options, "final_regret": interval95(regret[:, -1]),
                "wall_time_s": timing["wall_time_s"],
                "compile_time_s": timing["compile_time_s"], "run_time_s": run_time,
                "steps_per_s": args.steps * len(parts.of(i)) / run_time,
                "seed_steps_per_s": timing["seed_rounds"] / run_time,
                "group_size": int(timing["group_size"]),
            }

    out = parts.out
    parts.join("regret.csv", copy)
    write_summary_json(out, summary)
    plot_bands(checkpoints, curves, out / "regret.png", ylabel="cumulative expected regret",
                title=f"{env.name}: d={env.context_dim}, K={env.num_arms}, {args.seeds} seeds")
    return summary, curves


def format_table(summary: dict[str, Any]) -> str:
    """The summary as a fixed-width text table, one line per agent."""
    lines = [f"{'agent':<32} {'final regret (95% CI)':>28} {'wall s':>8} {'seed-steps/s':>13}"]
    for label, entry in summary["agents"].items():
        band = format_interval(entry["final_regret"], 1)
        lines.append(f"{label:<32} {band:>28} {entry['wall_time_s']:>8.2f} "
                     f"{entry['seed_steps_per_s']:>13.3g}")
    return "\n".join(lines)


def plot_regret_csv(directory: str | Path) -> Path:
    """Redraw ``regret.png`` in ``directory`` from its ``regret.csv``; returns the path.

    Raises ``ValueError`` naming the file when it lacks its header, a row is cut or holds a
    non-number, it has no rows, or a label's rows do not fill whole seeds.
    """
    from hyperx.commands._rundir import read_summary

    directory = Path(directory)
    path = directory / "regret.csv"
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        if tuple(header) != CSV_COLUMNS:
            raise ValueError(f"{path}: expected the header {','.join(CSV_COLUMNS)}, got "
                             f"{','.join(header) or 'none'}")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path}: holds no rows (nothing to plot)")
    values: dict[str, list[float]] = {}
    steps: set[int] = set()
    for number, r in enumerate(rows, start=2):
        try:
            agent, config, _, t, regret = r
            steps.add(int(t))
            values.setdefault(f"{agent}:{config}" if config else agent, []).append(float(regret))
        except ValueError:
            raise ValueError(f"{path}: line {number} is not agent, config, seed, t, regret: "
                             f"{','.join(r)}") from None
    t = np.array(sorted(steps))
    for label, v in values.items():
        if len(v) % t.size:
            raise ValueError(f"{path}: {label} has {len(v)} rows, not a whole number of seeds "
                             f"of {t.size} checkpoints")
    curves = {label: np.reshape(v, (-1, t.size)) for label, v in values.items()}
    meta = read_summary(directory / "summary.json")
    title = "" if meta is None else (f"{meta.get('env_name', '?')}: d={meta.get('dim', '?')}, "
                                     f"K={meta.get('arms', '?')}, {meta.get('seeds', '?')} seeds")
    plot_bands(t, curves, directory / "regret.png", ylabel="cumulative expected regret",
               title=title)
    return directory / "regret.png"
