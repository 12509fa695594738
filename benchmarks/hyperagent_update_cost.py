"""Where HyperAgent's Atari gradient step spends its work against DQN's, and its cost in the loop.

Both agents at atari_throughput.py's settings (a 256-unit Nature CNN, batch 32, the frame
replay), on Breakout:

* ``work``: XLA's cost analysis of one compiled gradient step (floating-point operations and
  bytes accessed; deterministic, independent of the machine's load) for ``dqn``,
  ``hyperagent``, and ``hyperagent`` with one of its parts removed at a time, the parts that
  make it dearer than DQN: the gradient-norm penalty (``grad_penalty=0``), the independent
  frozen prior torso (``prior_torso="shared"``: the prior reads the learned torso's features,
  no second CNN), the 20 indices per transition (``num_indices=1``), the MinMax features
  (``feature_norm="none"``), and the penalty and prior torso together;
* ``in_loop``: seconds per gradient step inside the compiled training loop, ``update_every x``
  (per-env-step time of the 1-game loop that learns minus that of the loop that never
  learns), atari_throughput.py's measure, for ``dqn`` and ``hyperagent``, ``--rounds`` rounds
  with the order reversed every other round; the ratio is the median of per-round ratios;
* ``--baseline PATH``: the ``work`` rows of ``dqn`` and ``hyperagent`` computed by the hyperx
  of another checkout (imported from PATH in a subprocess), the "before" of a change.

Writes benchmarks/results/hyperagent_update_cost.json. Run (about 15 minutes on 2 cores, the
machine to itself): ``python benchmarks/hyperagent_update_cost.py --baseline /path/to/checkout``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from atari_throughput import compiled, config, write_result

from hyperx.agents.core import make_agent
from hyperx.envs.atari import OBS_SHAPE, action_meanings
from hyperx.replay_frames import make_frame_replay

OUT = os.path.join(os.path.dirname(__file__), "results", "hyperagent_update_cost.json")
GAME = "Breakout"
VARIANTS: dict[str, tuple[str, dict]] = {
    "dqn": ("dqn", {}),
    "hyperagent": ("hyperagent", {}),
    "hyperagent_no_grad_penalty": ("hyperagent", {"grad_penalty": 0.0}),
    "hyperagent_shared_prior_torso": ("hyperagent", {"prior_torso": "shared"}),
    "hyperagent_one_index": ("hyperagent", {"num_indices": 1}),
    "hyperagent_no_minmax": ("hyperagent", {"feature_norm": "none"}),
    "hyperagent_no_grad_penalty_shared_prior_torso": (
        "hyperagent", {"grad_penalty": 0.0, "prior_torso": "shared"}),
}
"""Row name -> (agent, config overrides)."""


def work(agent: str, overrides: dict) -> dict:
    """XLA's cost analysis of one compiled gradient step of ``agent`` (no data needed: the
    update is lowered on the state's shapes)."""
    num_actions = len(action_meanings(GAME))
    fns = make_agent(config(agent, 10**9, **overrides), num_actions,
                     jnp.zeros(OBS_SHAPE, jnp.uint8), num_envs=1, replay=make_frame_replay,
                     step_budget=4096)
    state = jax.eval_shape(fns.init, jax.random.PRNGKey(0))
    cost = jax.jit(fns.update).lower(state, jax.random.PRNGKey(0)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"gflops": cost["flops"] / 1e9, "gbytes_accessed": cost["bytes accessed"] / 1e9}


def work_rows(names: list[str]) -> dict:
    rows = {name: work(*VARIANTS[name]) for name in names}
    for row in rows.values():
        row["gflops_ratio_to_dqn"] = row["gflops"] / rows["dqn"]["gflops"]
    return rows


def baseline_work(path: str) -> dict:
    """:func:`work_rows` of dqn and hyperagent with the hyperx found at ``path``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "work.json")
        env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
        subprocess.run([sys.executable, __file__, "--work-only", "--out", out], check=True,
                       env=env)
        with open(out) as f:
            rows = json.load(f)["work"]
    commit = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"commit": commit, "work": rows}


def in_loop(rounds: int, steps: int) -> dict:
    """Seconds per gradient step inside the compiled loop, per agent and round."""
    seconds: dict[str, list[float]] = {"dqn": [], "hyperagent": []}
    for r in range(rounds):
        order = ["dqn", "hyperagent"] if r % 2 == 0 else ["hyperagent", "dqn"]
        for agent in order:
            learns = compiled(agent, GAME, steps, 1, 1)
            idle = compiled(agent, GAME, steps, 1, 1, learning_starts=10**9)
            t = 4 * (1 / learns["env_steps_per_s"] - 1 / idle["env_steps_per_s"])
            seconds[agent].append(t)
            print(f"round {r}: {agent} {t * 1e3:.1f} ms per gradient step in the loop, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    ratios = [h / d for h, d in zip(seconds["hyperagent"], seconds["dqn"], strict=True)]
    return {"seconds": seconds, "ratio_hyperagent_to_dqn": ratios,
            "median_ratio": float(np.median(ratios)),
            "median_seconds": {k: float(np.median(v)) for k, v in seconds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1024, help="env steps per loop run")
    parser.add_argument("--baseline", default=None,
                        help="a checkout whose hyperx gives the 'before' work rows")
    parser.add_argument("--work-only", action="store_true",
                        help="only the dqn and hyperagent work rows (used for --baseline)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    if args.work_only:
        write_result({"work": work_rows(["dqn", "hyperagent"])}, args.out)
        return
    result = {"game": GAME, "device": str(jax.devices()[0]), "work": work_rows(list(VARIANTS))}
    print(json.dumps(result["work"], indent=1), flush=True)
    if args.baseline:
        result["baseline"] = baseline_work(args.baseline)
    if args.rounds:
        result["in_loop"] = in_loop(args.rounds, args.steps)
    result["load_average"] = os.getloadavg()
    shown = {**vars(args), "baseline": args.baseline and
             f"<a checkout of {result['baseline']['commit'][:7]}>"}
    result["command"] = "python benchmarks/hyperagent_update_cost.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in shown.items()
        if k not in ("out", "work_only") and v is not None)
    write_result(result, args.out)


if __name__ == "__main__":
    main()
