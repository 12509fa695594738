"""The ``hyperx`` console script.

``hyperx demo`` runs the library's main jobs on embedded defaults and prints what it found;
``hyperx bandit`` runs a regret sweep of bandit learners over many seeds;
``hyperx deepsea`` trains a value-based agent on DeepSea and writes returns, summary and plot;
``hyperx atari`` trains a value-based agent on an Atari game (envpool or ale-py);
``hyperx llm`` runs RL on a small causal LM under a training-inference mismatch;
``hyperx games`` plays repeated games between no-regret learners (GP-MW, Exp3, Hedge);
``hyperx plot DIR`` redraws the plot of a bandit, games or DeepSea run from its CSV.
Argument errors print one line (``hyperx: error: ...``) and exit with status 2.
"""


from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Sequence
from pathlib import Path

from hyperx._argparse import (
    OneLineParser,
    add_run_dir_options,
    check_out_path,
    check_out_usable,
    fail,
    interrupted,
    non_negative_int,
    plural,
    positive_int,
)

DESCRIPTION = ("hyperx: JAX-native exploration under uncertainty. Run a subcommand with --help "
               "for its options.")
DEMO_AGENTS = "exact_ts,linucb,ensemble_pp:M=16,ensemble_pp:M=16,index=sphere,epsilon_greedy"


def demo_commands(steps: int, seeds: int, dim: int, out: str) -> tuple[list[str], list[str]]:
    """The bandit and DeepSea command lines of ``hyperx demo --steps T --seeds S``: the sweep
    runs T rounds for ceil(S / 10) seeds, DeepSea(10) ceil(0.4 T) episodes for ceil(S / 500)
    seeds (the defaults T = 1000, S = 2000 give 200 and 4 seeds, 400 episodes)."""
    bandit = ["bandit", "--env", "linear", "--dim", str(dim), "--arms", "100", "--steps",
              str(steps), "--seeds", str(-(-seeds // 10)), "--agents", DEMO_AGENTS,
              "--out", os.path.join(out, "bandit"), "--overwrite"]
    deepsea = ["deepsea", "--size", "10", "--agent", "hyperagent", "--seeds",
               str(-(-seeds // 500)), "--episodes", str(-(-2 * steps // 5)), "--quiet",
               "--out", os.path.join(out, "deepsea"), "--overwrite"]
    return bandit, deepsea


def _demo(args: argparse.Namespace) -> int:
    from hyperx.bandits.sweep import check_args
    from hyperx.demos.linear import check_linear_demo_memory, run_linear_demo

    check_out_usable(args.out)
    bandit, deepsea = demo_commands(args.steps, args.seeds, args.dim, args.out)
    try:  # every part's sizes before any work or folder
        check_linear_demo_memory(args.dim, args.index_dim, args.steps, args.seeds,
                                 name=f"--seeds {args.seeds}, --index-dim {args.index_dim}, "
                                      f"--dim {args.dim}, --steps {args.steps}")
    except ValueError as err:
        fail(str(err))
    parser = build_parser()
    check_args(parser.parse_args(bandit))
    _check_deepsea(parser.parse_args(deepsea))
    check_out_path(args.out)
    print("[1/3] linear Ensemble++ against the exact Bayesian posterior")
    run_linear_demo(dim=args.dim, index_dim=args.index_dim, steps=args.steps, seeds=args.seeds)
    print("\n[2/3] contextual-bandit regret sweep: hyperx " + " ".join(bandit))
    main(bandit)
    print("\n[3/3] DeepSea: hyperx " + " ".join(deepsea))
    return main(deepsea)


def _plot(args: argparse.Namespace) -> int:
    from hyperx.agents.deepsea_report import plot_returns_csv
    from hyperx.bandits.sweep import plot_regret_csv
    from hyperx.games.cli import is_games_csv, plot_games_csv

    directory = args.dir
    regret = os.path.join(directory, "regret.csv")
    try:
        if os.path.isfile(regret) and is_games_csv(Path(regret)):
            path = plot_games_csv(directory)
        elif os.path.isfile(regret):
            path = plot_regret_csv(directory)
        elif os.path.isfile(os.path.join(directory, "returns.csv")):
            path = plot_returns_csv(directory)
        else:
            path = None
    except (ValueError, UnicodeDecodeError, csv.Error) as err:
        fail(f"DIR: {err}")
    if path is None:
        fail(f"DIR: {directory!r} holds neither regret.csv (hyperx bandit, hyperx games) nor "
             "returns.csv (hyperx deepsea)")
    print(f"wrote {path}")
    return 0


DEEPSEA_OUTPUTS = ("returns.csv", "summary.json", "deepsea.png", "checkpoints")
DEEPSEA_SETTINGS = ("size", "agent", "seeds", "episodes", "seed", "mapping_seed",
                    "per_seed_mappings", "chunk_steps", "checkpoint")


def _deepsea(args: argparse.Namespace) -> int:
    from hyperx._rundir import prepare_out, write_manifest
    from hyperx.agents.deepsea import train_deepsea
    from hyperx.agents.deepsea_report import ReturnsWriter, describe, write_outputs
    from hyperx.loop import TrainingInterrupted

    config, program = _check_deepsea(args)
    settings = {key: getattr(args, key) for key in DEEPSEA_SETTINGS}
    out, manifest = prepare_out(args.out, "deepsea", settings, resume=args.resume,
                                overwrite=args.overwrite, outputs=DEEPSEA_OUTPUTS)
    if manifest is not None and manifest.get("complete"):
        print(f"run is complete: {out} holds all {args.episodes} episodes of this run; nothing "
              "to do (--overwrite runs it again)")
        return 0
    if manifest is not None and not args.checkpoint:
        fail(f"--resume: {args.out!r} was run without --checkpoint, so there is no state to "
             "resume from; rerun without --resume")
    mapping = (list(range(args.mapping_seed, args.mapping_seed + args.seeds))
               if args.per_seed_mappings else args.mapping_seed)
    writer = ReturnsWriter(out / "returns.csv")
    try:
        result = train_deepsea(
            config, args.size, args.episodes, num_seeds=args.seeds, seed=args.seed,
            mapping_seeds=mapping, chunk_steps=args.chunk_steps,
            checkpoint_dir=str(out / "checkpoints") if args.checkpoint else None,
            progress=not args.quiet, program=program,
            on_chunk=lambda c: writer(c.carry.seeds.returns, c.carry.seeds.bad,
                                      c.done // args.size))
    except TrainingInterrupted as stop:
        where = (f"checkpoint at step {stop.checkpoint_step} in {out / 'checkpoints'}; rerun the "
                 "same command with --resume to continue" if stop.checkpoint_step is not None
                 else "no checkpoint (run with --checkpoint to make a run resumable)")
        interrupted(f"after env step {stop.done} of {args.size * args.episodes}; the "
                    f"finished episodes are in {out / 'returns.csv'}; {where}")
    except ValueError as err:
        fail(str(err))
    summary = write_outputs(result, str(out), agent=args.agent, size=args.size,
                            returns=writer.written is None)
    write_manifest(out, "deepsea", settings, complete=True)
    if result.steps_at_start == result.steps_done:
        print(f"run is complete: {out} holds all {args.episodes} episodes of this run; "
              f"rebuilt summary.json and deepsea.png; {describe(summary)}")
        return 0
    rate = result.env_steps_per_s
    print(f"{args.agent} on DeepSea({args.size}), {plural(args.seeds, 'seed')}: "
          f"{describe(summary)}; {rate:.0f} env steps/s summed over "
          f"{plural(args.seeds, 'seed')} ({rate / args.seeds:.0f} per seed, the bar's unit); "
          f"wrote {out}")
    return 0


def _check_deepsea(args: argparse.Namespace):
    """What :func:`_deepsea` checks before it touches ``--out`` (mapping seeds, the sizes of
    the program and of the seeds' carry); returns the agent config and its program."""
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import check_carry_memory, make_program
    from hyperx.envs.deepsea import MAX_MAPPING_SEED

    last = args.mapping_seed + (args.seeds - 1 if args.per_seed_mappings else 0)
    if last > MAX_MAPPING_SEED:
        fail(f"--mapping-seed: expected mapping seeds in [0, {MAX_MAPPING_SEED}], got "
             f"{args.mapping_seed} .. {last}")
    config = get_config(args.agent)
    try:
        program = make_program(config, args.size, args.episodes, args.chunk_steps)
        check_carry_memory(program, args.seeds)
    except ValueError as err:
        fail(f"--size {args.size}, --episodes {args.episodes}, --seeds {args.seeds}: {err}")
    return config, program


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hyperx`` command (exposed for tests and docs)."""
    parser = OneLineParser(prog="hyperx", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    demo = sub.add_parser(
        "demo", help="Ensemble++ vs the exact posterior, a bandit sweep, DeepSea",
        description="The library's main jobs on small defaults: linear Ensemble++ against the "
                    "exact posterior, a bandit regret sweep and HyperAgent on DeepSea(10). "
                    "--steps and --seeds scale all three parts.")
    demo.add_argument("--dim", type=positive_int, default=20, help="feature dimension d")
    demo.add_argument("--index-dim", type=positive_int, default=16, help="Ensemble++ width M")
    demo.add_argument("--steps", type=positive_int, default=1000,
                      help="T: observations, bandit rounds, and 0.4 T DeepSea episodes")
    demo.add_argument("--seeds", type=positive_int, default=2000,
                      help="S: linear seeds, S/10 bandit seeds, S/500 DeepSea seeds")
    demo.add_argument("--out", default="demo_out", help="output directory of the sweep and run")
    demo.set_defaults(func=_demo)
    plot = sub.add_parser("plot", help="redraw a run's plot from its CSV",
                          description="Redraw regret.png (hyperx bandit) or deepsea.png "
                                      "(hyperx deepsea) in DIR from the CSV there.")
    plot.add_argument("dir", metavar="DIR", help="output directory of a bandit or DeepSea run")
    plot.set_defaults(func=_plot)
    _add_deepsea_parser(sub)
    from hyperx.bandits import sweep

    sweep.register(sub)
    __import__("hyperx.llm.cli", fromlist=["register"]).register(sub)
    __import__("hyperx.agents.atari_cli", fromlist=["register"]).register(sub)
    __import__("hyperx.games.cli", fromlist=["register"]).register(sub)
    return parser


def _add_deepsea_parser(sub: argparse._SubParsersAction) -> None:
    from hyperx.agents.config import AGENT_NAMES

    deep = sub.add_parser(
        "deepsea", help="train a value-based agent on DeepSea for many seeds",
        description="Train a value-based agent on DeepSea(N) for many vmapped seeds; writes "
                    "returns.csv (chunk by chunk), summary.json and deepsea.png to --out.")
    deep.add_argument("--size", type=positive_int, default=20, help="DeepSea size N")
    deep.add_argument("--agent", choices=AGENT_NAMES, default="hyperagent", help="agent config")
    deep.add_argument("--seeds", type=positive_int, default=5, help="vmapped seeds")
    deep.add_argument("--episodes", type=positive_int, default=2000, help="episodes per seed")
    deep.add_argument("--out", required=True, help="output directory")
    deep.add_argument("--seed", type=non_negative_int, default=0, help="base seed")
    deep.add_argument("--mapping-seed", type=non_negative_int, default=42,
                      help="bsuite action-mapping seed (>= 0)")
    deep.add_argument("--per-seed-mappings", action="store_true",
                      help="seed s uses mapping seed MAPPING_SEED + s")
    deep.add_argument("--chunk-steps", type=positive_int, default=None,
                      help="env steps per compiled chunk")
    deep.add_argument("--checkpoint", action="store_true",
                      help="checkpoint to OUT/checkpoints after each chunk (--resume continues)")
    add_run_dir_options(deep)
    deep.add_argument("--quiet", action="store_true", help="no progress bar")
    deep.set_defaults(func=_deepsea)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hyperx`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
