"""The ``hyperx`` console script.

``hyperx demo`` runs the library's main jobs on embedded defaults and prints what it found;
``hyperx bandit`` runs a regret sweep of bandit learners over many seeds;
``hyperx deepsea`` trains a value-based agent on DeepSea and writes returns, summary and plot.
Argument errors print one line (``hyperx: error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from hyperx._argparse import OneLineParser, positive_int

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


def _deepsea(args: argparse.Namespace) -> int:
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import train_deepsea
    from hyperx.agents.deepsea_report import write_outputs

    mapping = (list(range(args.mapping_seed, args.mapping_seed + args.seeds))
               if args.per_seed_mappings else args.mapping_seed)
    checkpoints = os.path.join(args.out, "checkpoints") if args.checkpoint else None
    result = train_deepsea(get_config(args.agent), args.size, args.episodes,
                           num_seeds=args.seeds, seed=args.seed, mapping_seeds=mapping,
                           chunk_steps=args.chunk_steps, checkpoint_dir=checkpoints,
                           progress=not args.quiet)
    summary = write_outputs(result, args.out, agent=args.agent, size=args.size)
    print(f"{args.agent} on DeepSea({args.size}), {args.seeds} seeds: learned (bsuite, exact "
          f"crossing) at {summary['learned_episode_bsuite']}; running mean at "
          f"{summary['learned_episode_running_mean']}; {result.env_steps_per_s:.0f} "
          f"env steps/s; wrote {args.out}")
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
    deep.add_argument("--mapping-seed", type=int, default=42, help="bsuite action-mapping seed")
    deep.add_argument("--per-seed-mappings", action="store_true",
                      help="seed s uses mapping seed MAPPING_SEED + s")
    deep.add_argument("--chunk-steps", type=positive_int, default=None,
                      help="env steps per compiled chunk")
    deep.add_argument("--checkpoint", action="store_true",
                      help="checkpoint to OUT/checkpoints after each chunk and resume from it")
    deep.add_argument("--quiet", action="store_true", help="no progress bar")
    deep.set_defaults(func=_deepsea)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hyperx`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
