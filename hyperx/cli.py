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
import platform
from collections.abc import Sequence
from pathlib import Path

import hyperx
from hyperx._argparse import (
    OneLineParser,
    add_run_dir_options,
    check_out_path,
    check_out_usable,
    fail,
    interrupted,
    non_negative_int,
    positive_int,
)
from hyperx._dryrun import WorkEstimate, add_dry_run_option, report
from hyperx._tracking import Tracker, add_tracking_option, check_tracking
from hyperx._validation import memory_estimates, plural

DESCRIPTION = ("hyperx: JAX-native exploration under uncertainty. Run a subcommand with --help "
               "for its options.")
DEMO_AGENTS = "exact_ts,linucb,ensemble_pp:M=16,ensemble_pp:M=16,index=sphere,epsilon_greedy"


def version_line() -> str:
    """``hyperx 0.1.0 (Python 3.11.7, jax 0.10.2, jaxlib 0.10.2)``: what ``--version`` prints,
    read from the installed distributions (without importing jax)."""
    from importlib import metadata

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (f"hyperx {hyperx.__version__} (Python {platform.python_version()}, "
            f"jax {installed('jax')}, jaxlib {installed('jaxlib')})")


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
    if args.dry_run:
        print(f"[1/3] linear Ensemble++ against the exact posterior: {args.seeds} seeds x "
              f"{args.steps} observations (d = {args.dim}, M = {args.index_dim})")
        print("[2/3] hyperx " + " ".join(bandit))
        main([*bandit, "--dry-run"])
        print("[3/3] hyperx " + " ".join(deepsea))
        return main([*deepsea, "--dry-run"])
    check_out_path(args.out)
    print("[1/3] linear Ensemble++ against the exact Bayesian posterior")
    run_linear_demo(dim=args.dim, index_dim=args.index_dim, steps=args.steps, seeds=args.seeds)
    print("\n[2/3] contextual-bandit regret sweep: hyperx " + " ".join(bandit))
    main(bandit)
    print("\n[3/3] DeepSea: hyperx " + " ".join(deepsea))
    return main(deepsea)


def _plot(args: argparse.Namespace) -> int:
    from hyperx.agents.atari_cli import plot_atari_csv
    from hyperx.agents.deepsea_report import plot_returns_csv
    from hyperx.bandits.sweep import plot_regret_csv
    from hyperx.games.cli import is_games_csv, plot_games_csv
    from hyperx.llm.cli import plot_metrics_csv

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


DEEPSEA_OUTPUTS = ("returns.csv", "summary.json", "deepsea.png", "tb", "wandb", "checkpoints")
DEEPSEA_SETTINGS = ("size", "agent", "seeds", "episodes", "seed", "mapping_seed",
                    "per_seed_mappings", "chunk_steps", "checkpoint")


DEEPSEA_RATE = 2_800
"""Env steps per second summed over seeds of HyperAgent on DeepSea(10) with 8 to 64 seeds in
one program, on the 2-core CPU (``benchmarks/results/deepsea_throughput.json``)."""


def _deepsea(args: argparse.Namespace) -> int:
    import numpy as np

    from hyperx._rundir import check_out_rules, prepare_out, write_manifest
    from hyperx.agents.deepsea import train_deepsea
    from hyperx.agents.deepsea_report import ReturnsWriter, describe, write_outputs
    from hyperx.loop import Chunk, TrainingInterrupted

    if args.eval_only:
        return _deepsea_eval_only(args)
    check_tracking(args.track)
    with memory_estimates() as memory:
        config, program = _check_deepsea(args)
    settings = {key: getattr(args, key) for key in DEEPSEA_SETTINGS}
    if args.dry_run:
        check_out_rules(args.out, "deepsea", settings, resume=args.resume,
                        overwrite=args.overwrite)
        return report("deepsea", out=args.out, resume=args.resume, memory=memory,
                      outputs=[o for o in DEEPSEA_OUTPUTS
                               if (o != "checkpoints" or args.checkpoint)
                               and (o != "wandb" or args.track)],
                      work=[WorkEstimate(args.size * args.episodes * args.seeds, "env step",
                                         DEEPSEA_RATE, "hyperagent on DeepSea(10), 8 to 64 "
                                         "seeds, benchmarks/results/deepsea_throughput.json",
                                         5.0)])
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
    tracker = Tracker(out, "deepsea", settings, track=args.track)

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

    try:
        result = train_deepsea(
            config, args.size, args.episodes, num_seeds=args.seeds, seed=args.seed,
            mapping_seeds=mapping, chunk_steps=args.chunk_steps,
            checkpoint_dir=str(out / "checkpoints") if args.checkpoint else None,
            progress=not args.quiet, program=program, on_chunk=log_chunk)
    except TrainingInterrupted as stop:
        where = (f"checkpoint at step {stop.checkpoint_step} in {out / 'checkpoints'}; rerun the "
                 "same command with --resume to continue" if stop.checkpoint_step is not None
                 else "no checkpoint (run with --checkpoint to make a run resumable)")
        interrupted(f"after env step {stop.done} of {args.size * args.episodes}; the "
                    f"finished episodes are in {out / 'returns.csv'}; {where}")
    except ValueError as err:
        fail(str(err))
    finally:
        tracker.close()
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


def _deepsea_eval_only(args: argparse.Namespace) -> int:
    """``--eval-only``: greedy episodes of the saved agent of the run in ``--out``, under
    that run's settings (:func:`hyperx.agents.deepsea.evaluate_saved`); writes
    ``eval_only.json``."""
    import json

    from hyperx._rundir import environment, saved_run, write_atomic
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
    try:
        saved = evaluate_saved(str(out / "checkpoints"), get_config(run.agent), run.size,
                               run.episodes, num_seeds=run.seeds, seed=run.seed,
                               mapping_seeds=mapping, chunk_steps=run.chunk_steps,
                               episodes=args.eval_episodes)
    except ValueError as err:
        fail(f"--eval-only: {err}")
    found = saved.treasure.mean(axis=1)
    result = {"env_step": saved.env_step, "protocol": saved.protocol,
              "treasure_fraction_per_seed": found.tolist(),
              "return_mean_per_seed": saved.returns.mean(axis=1).tolist(),
              "returns": saved.returns.tolist(), "environment": environment()}
    write_atomic(out / "eval_only.json", json.dumps(result, indent=2) + "\n")
    print(f"{run.agent} on DeepSea({run.size}), the checkpoint of env step {saved.env_step}: "
          f"{plural(int((found > 0).sum()), 'seed')} of {run.seeds} reach the treasure, in "
          f"{found.mean():.0%} of {plural(args.eval_episodes, 'greedy episode')} per seed; "
          f"wrote {out / 'eval_only.json'}")
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
    parser.add_argument("--version", action="version", version=version_line())
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
    add_dry_run_option(demo)
    demo.set_defaults(func=_demo)
    plot = sub.add_parser("plot", help="redraw a run's plot from its CSV",
                          description="Redraw the plot of a run in DIR from the CSV there: "
                                      "regret.png (hyperx bandit, hyperx games), deepsea.png "
                                      "(hyperx deepsea), returns.png (hyperx atari) or "
                                      "curves.png (hyperx llm).")
    plot.add_argument("dir", metavar="DIR", help="output directory of a hyperx run")
    add_dry_run_option(plot)
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
    deep.add_argument("--eval-only", action="store_true",
                      help="instead of training, play greedy episodes with the newest intact "
                           "checkpoint of the run in --out (the settings in its run.json); "
                           "writes OUT/eval_only.json")
    deep.add_argument("--eval-episodes", type=positive_int, default=10,
                      help="with --eval-only: greedy episodes per seed")
    deep.add_argument("--quiet", action="store_true", help="no progress bar")
    add_tracking_option(deep)
    add_dry_run_option(deep)
    deep.set_defaults(func=_deepsea)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hyperx`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
