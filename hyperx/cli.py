"""The ``hyperx`` console script.

``hyperx demo`` runs the library's main jobs on embedded defaults and prints what it found;
``hyperx bandit`` runs a regret sweep of bandit learners over many seeds;
``hyperx deepsea`` trains a value-based agent on DeepSea and writes returns, summary and plot;
``hyperx llm`` runs RL on a small causal LM under a training-inference mismatch.
Argument errors print one line (``hyperx: error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from hyperx._argparse import (
    OneLineParser,
    add_run_dir_options,
    fail,
    interrupted,
    non_negative_int,
    positive_int,
)

DEMO_BANDIT = ["--env", "linear", "--dim", "20", "--arms", "100", "--steps", "1000",
               "--seeds", "200", "--agents",
               "exact_ts,linucb,ensemble_pp:M=16,ensemble_pp:M=16,index=sphere,epsilon_greedy"]
DEMO_DEEPSEA = ["--size", "10", "--agent", "hyperagent", "--seeds", "4", "--episodes", "400"]


def _demo(args: argparse.Namespace) -> int:
    from hyperx.demos.linear import run_linear_demo

    print("[1/3] linear Ensemble++ against the exact Bayesian posterior")
    run_linear_demo(dim=args.dim, index_dim=args.index_dim, steps=args.steps, seeds=args.seeds)
    print("\n[2/3] contextual-bandit regret sweep: hyperx bandit " + " ".join(DEMO_BANDIT))
    main(["bandit", *DEMO_BANDIT, "--out", os.path.join(args.out, "bandit")])
    print("\n[3/3] DeepSea: hyperx deepsea " + " ".join(DEMO_DEEPSEA))
    return main(["deepsea", *DEMO_DEEPSEA, "--quiet", "--out", os.path.join(args.out, "deepsea")])


DEEPSEA_OUTPUTS = ("returns.csv", "summary.json", "deepsea.png", "checkpoints")
DEEPSEA_SETTINGS = ("size", "agent", "seeds", "episodes", "seed", "mapping_seed",
                    "per_seed_mappings", "chunk_steps", "checkpoint")


def _deepsea(args: argparse.Namespace) -> int:
    from hyperx._rundir import prepare_out, write_manifest
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import (
        TrainingInterrupted,
        check_carry_memory,
        make_program,
        train_deepsea,
    )
    from hyperx.agents.deepsea_report import ReturnsWriter, describe, write_outputs
    from hyperx.envs.deepsea import MAX_MAPPING_SEED

    last = args.mapping_seed + (args.seeds - 1 if args.per_seed_mappings else 0)
    if last > MAX_MAPPING_SEED:
        fail(f"--mapping-seed: expected mapping seeds in [0, {MAX_MAPPING_SEED}], got "
             f"{args.mapping_seed} .. {last}")
    config = get_config(args.agent)
    try:
        check_carry_memory(make_program(config, args.size, args.episodes), args.seeds)
    except ValueError as err:
        fail(f"--size {args.size}, --episodes {args.episodes}, --seeds {args.seeds}: {err}")
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
            progress=not args.quiet,
            on_chunk=lambda c: writer(c.seeds.returns, c.seeds.bad,
                                      min(int(c.t), args.size * args.episodes) // args.size))
    except TrainingInterrupted as stop:
        where = (f"checkpoint at step {stop.checkpoint_step} in {out / 'checkpoints'}; rerun the "
                 "same command with --resume to continue" if stop.checkpoint_step is not None
                 else "no checkpoint (run with --checkpoint to make a run resumable)")
        interrupted(f"after env step {stop.steps_done} of {args.size * args.episodes}; the "
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
    print(f"{args.agent} on DeepSea({args.size}), {args.seeds} seeds: {describe(summary)}; "
          f"{result.env_steps_per_s:.0f} env steps/s; wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hyperx`` command (exposed for tests and docs)."""
    parser = OneLineParser(prog="hyperx", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    demo = sub.add_parser("demo", help="Ensemble++ vs the exact posterior, a bandit sweep, DeepSea")
    demo.add_argument("--dim", type=positive_int, default=20, help="feature dimension d")
    demo.add_argument("--index-dim", type=positive_int, default=16, help="Ensemble++ width M")
    demo.add_argument("--steps", type=positive_int, default=1000, help="observations T")
    demo.add_argument("--seeds", type=positive_int, default=2000, help="vmapped seeds")
    demo.add_argument("--out", default="demo_out", help="output directory of the sweep and run")
    demo.set_defaults(func=_demo)
    _add_deepsea_parser(sub)
    from hyperx.bandits import sweep

    sweep.register(sub)
    __import__("hyperx.llm.cli", fromlist=["register"]).register(sub)
    return parser


def _add_deepsea_parser(sub: argparse._SubParsersAction) -> None:
    from hyperx.agents.config import AGENT_NAMES

    deep = sub.add_parser("deepsea", help="train a value-based agent on DeepSea for many seeds")
    deep.add_argument("--size", type=positive_int, default=20, help="DeepSea size N")
    deep.add_argument("--agent", choices=AGENT_NAMES, default="hyperagent", help="agent config")
    deep.add_argument("--seeds", type=positive_int, default=5, help="vmapped seeds")
    deep.add_argument("--episodes", type=positive_int, default=2000, help="episodes per seed")
    deep.add_argument("--out", required=True, help="output directory")
    deep.add_argument("--seed", type=int, default=0, help="base seed")
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
