"""``hyperx demo``: the library's main jobs on small defaults, each printing what it found.

Linear Ensemble++ against the exact Bayesian posterior (:mod:`hyperx.demos.linear`), then a
bandit regret sweep (``hyperx bandit``) and HyperAgent on DeepSea(10) (``hyperx deepsea``),
each run through its own command so that the demo's folders are ordinary run folders.
"""

from __future__ import annotations

import argparse
import os

from hyperx.commands._args import check_out_path, check_out_usable, failing, positive_int
from hyperx.commands._dryrun import add_dry_run_option

AGENTS = "exact_ts,linucb,ensemble_pp:M=16,ensemble_pp:M=16,index=sphere,epsilon_greedy"
"""The bandit learners the demo's sweep compares."""


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    demo = subparsers.add_parser(
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
    demo.set_defaults(func=run_from_args)
    return demo


def demo_commands(steps: int, seeds: int, dim: int, out: str) -> tuple[list[str], list[str]]:
    """The bandit and DeepSea command lines of ``hyperx demo --steps T --seeds S``: the sweep
    runs T rounds for ceil(S / 10) seeds, DeepSea(10) ceil(0.4 T) episodes for ceil(S / 500)
    seeds (the defaults T = 1000, S = 2000 give 200 and 4 seeds, 400 episodes)."""
    bandit = ["bandit", "--env", "linear", "--dim", str(dim), "--arms", "100", "--steps",
              str(steps), "--seeds", str(-(-seeds // 10)), "--agents", AGENTS,
              "--out", os.path.join(out, "bandit"), "--overwrite"]
    deepsea = ["deepsea", "--size", "10", "--agent", "hyperagent", "--seeds",
               str(-(-seeds // 500)), "--episodes", str(-(-2 * steps // 5)), "--quiet",
               "--out", os.path.join(out, "deepsea"), "--overwrite"]
    return bandit, deepsea


def run_from_args(args: argparse.Namespace) -> int:
    """Run the three parts (module docstring), every part's sizes checked before any work."""
    from hyperx.commands import bandit as bandit_command
    from hyperx.commands import build_parser, main
    from hyperx.commands import deepsea as deepsea_command
    from hyperx.demos.linear import check_linear_demo_memory, run_linear_demo

    check_out_usable(args.out)
    bandit, deepsea = demo_commands(args.steps, args.seeds, args.dim, args.out)
    with failing():
        check_linear_demo_memory(args.dim, args.index_dim, args.steps, args.seeds,
                                 name=f"--seeds {args.seeds}, --index-dim {args.index_dim}, "
                                      f"--dim {args.dim}, --steps {args.steps}")
    parser = build_parser()
    bandit_command.check_args(parser.parse_args(bandit))
    deepsea_command.check_args(parser.parse_args(deepsea))
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
