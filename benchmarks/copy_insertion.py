"""The copy-insertion option of the compiled loops, A/B on the real Atari loop.

:func:`hyperx.loop.compiler_options` turns on XLA:CPU copy insertion with region analysis, so
a step that does not learn stops copying the parameters and Adam moments. This benchmark runs
the compiled Breakout loop of :mod:`benchmarks.atari_throughput` (one game per agent, batch 32,
one update per 4 env steps, the 256-unit Nature CNN) with and without the option, alternating
in ``--rounds`` rounds so both share the machine's noise, and reports each round's env steps/s
and load average and the median ratio with/without; then the same loop that never learns
(``learning_starts`` beyond the run: every step is a no-learn step) for dqn with the 256- and
512-unit layer, as milliseconds per step.

    python benchmarks/copy_insertion.py            # dqn and hyperagent, 3 rounds, ~9 minutes

Writes benchmarks/results/copy_insertion.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import atari_throughput  # noqa: E402

import hyperx.loop as loop  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                   "copy_insertion.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["dqn", "hyperagent"])
    parser.add_argument("--steps", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    with_option = loop.compiler_options
    rows, summary = [], {}
    for agent in args.agents:
        for round_ in range(args.rounds):
            for option in (True, False):
                loop.compiler_options = with_option if option else dict
                row = atari_throughput.compiled(agent, args.game, args.steps, 1, 1)
                rows.append({"agent": agent, "round": round_, "region_analysis": option,
                             "env_steps_per_s": row["env_steps_per_s"],
                             "load_average": os.getloadavg()[0]})
                print(rows[-1], flush=True)
        pairs = [(a["env_steps_per_s"], b["env_steps_per_s"])
                 for a, b in zip(rows[-2 * args.rounds::2], rows[-2 * args.rounds + 1::2],
                                 strict=True)]
        summary[agent] = {"median_with": float(np.median([a for a, _ in pairs])),
                          "median_without": float(np.median([b for _, b in pairs])),
                          "median_pair_ratio": float(np.median([a / b for a, b in pairs]))}
        print(agent, summary[agent], flush=True)
    idle = []
    for round_ in range(2):
        for option in (True, False):
            loop.compiler_options = with_option if option else dict
            for width in (256, 512):
                row = atari_throughput.compiled("dqn", args.game, 2 * args.steps, 1, 1,
                                                learning_starts=10**9, width=width)
                idle.append({"agent": "dqn", "torso_width": width, "round": round_,
                             "region_analysis": option,
                             "ms_per_step": 1e3 / row["env_steps_per_s"],
                             "load_average": os.getloadavg()[0]})
                print(idle[-1], flush=True)
    for width in (256, 512):
        for option in (True, False):
            summary[f"no_learning_dqn_{width}_ms_per_step_{'with' if option else 'without'}"] = [
                r["ms_per_step"] for r in idle
                if r["torso_width"] == width and r["region_analysis"] == option]
    loop.compiler_options = with_option
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"command": "python benchmarks/copy_insertion.py " + " ".join(
            f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items() if k != "out"), "summary": summary,
            "rows": rows, "no_learning_rows": idle}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
