"""A learning run on this CPU: does each agent's Atari play rise above a random policy's?

Each agent trains ``--seeds`` seeds in one program (:func:`hyperx.agents.atari.train_atari`,
``--envs-per-seed`` games each) for ``--steps`` env steps per seed, at one gradient step (batch
32) per ``--update-every`` env steps for every agent alike, so the agents get the same compute.
At the end the final policy of every seed plays ``--final-eval-episodes`` greedy games (no life
loss, no clipping, a fresh index per game, capped at ``--eval-max-steps`` agent steps) and a
uniformly random policy plays ``--random-episodes`` games under the same protocol.

Reported per agent: training games' raw scores (whole games, with the agent's exploration)
in the first and last fifth of the run, the evaluation curve, the final evaluation, each with a
95% bootstrap interval over games (10,000 resamples), and the random policy's. Per agent a
result file is written to ``--out-dir/<agent>.json`` as soon as its run ends, and a rerun skips
the agents already there. Summary: ``benchmarks/results/atari_learning.json`` and the curve
``atari_learning.png``.

The run in benchmarks/results (about an hour on 2 CPU cores):
``python benchmarks/atari_learning.py --game Breakout --agents dqn hyperagent --seeds 2
--envs-per-seed 4 --steps 40000``. Tiny check: ``python benchmarks/atari_learning.py --steps
256 --seeds 1 --eval-episodes 1 --final-eval-episodes 2 --random-episodes 2 --eval-max-steps 50
--out-dir /tmp/al``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import jax
import numpy as np
from atari_parity import policy_scores

from hyperx.agents import get_config
from hyperx.agents.atari import PAD, evaluate, make_program, train_atari
from hyperx.envs.atari import make_atari

RESULTS = os.path.join(os.path.dirname(__file__), "results")
OUT_DIR = os.path.join(RESULTS, "atari_learning")


def bootstrap_mean(x: np.ndarray, resamples: int = 10_000, seed: int = 0) -> dict:
    """Mean of ``x`` with its 95% percentile-bootstrap interval."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return {"mean": None, "ci95": None, "n": 0}
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, (resamples, x.size))].mean(axis=1)
    return {"mean": float(x.mean()), "ci95": [float(np.quantile(means, 0.025)),
                                              float(np.quantile(means, 0.975))],
            "n": int(x.size)}


def run_agent(name: str, args: argparse.Namespace) -> dict:
    overrides = dict(update_every=args.update_every)
    if name == "dqn":
        overrides["epsilon_decay_steps"] = args.epsilon_decay_steps
    config = get_config(name, env="atari", **overrides)
    start = time.perf_counter()
    result = train_atari(config, args.game, steps=args.steps, seeds=args.seeds,
                         envs_per_seed=args.envs_per_seed, seed=args.seed,
                         eval_every=args.steps // args.evaluations,
                         eval_episodes=args.eval_episodes, eval_max_steps=args.eval_max_steps,
                         checkpoint_dir=os.path.join(args.out_dir, "checkpoints", name),
                         on_chunk=lambda c: print(f"{name}: {c.done}/{c.total} "
                                                  f"{c.metrics['steps_per_s']:.1f} env steps/s",
                                                  flush=True))
    train_time = time.perf_counter() - start
    eval_env = make_atari(args.game, num_envs=args.seeds * args.final_eval_episodes,
                          seed=args.seed + 30_000, training=False)
    program = make_program(config, eval_env.num_actions, args.seeds, args.envs_per_seed,
                           math.ceil(args.steps / args.envs_per_seed), PAD["envpool"])
    agents = result.carry.seeds.agent
    final = evaluate(program, agents.params, agents.prior, eval_env,
                     jax.random.PRNGKey(args.seed + 3), args.final_eval_episodes,
                     args.seed + 30_000, args.eval_max_steps)
    eval_env.close()
    scores = np.array([e["score"] for e in result.episodes])
    steps = np.array([e["env_step"] for e in result.episodes])
    fifth = args.steps // 5
    return {
        "agent": name, "config_overrides": overrides, "steps_per_seed": args.steps,
        "seeds": args.seeds, "envs_per_seed": args.envs_per_seed,
        "train_time_s": train_time, "env_steps_per_s": result.env_steps_per_s,
        "compile_time_s": result.compile_time_s,
        "training_first_fifth": bootstrap_mean(scores[steps <= fifth]),
        "training_last_fifth": bootstrap_mean(scores[steps > args.steps - fifth]),
        "training_games": [dict(e) for e in result.episodes],
        "evaluations": result.evaluations,
        "final_eval": bootstrap_mean(final.reshape(-1)),
        "final_eval_per_seed": final.tolist(),
        "best": result.best,
    }


def _above(scores: dict, random: dict) -> bool | None:
    """Whether the lower end of ``scores``' interval clears the upper end of the random's."""
    if scores["n"] == 0 or random["n"] == 0:
        return None
    return scores["ci95"][0] > random["ci95"][1]


def plot(rows: list[dict], random: dict, path: str, game: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_train, ax_eval) = plt.subplots(1, 2, figsize=(11, 4))
    for row in rows:
        games = sorted(row["training_games"], key=lambda g: g["env_step"])
        x = np.array([g["env_step"] for g in games])
        y = np.array([g["score"] for g in games])
        window = max(len(y) // 20, 1)
        if len(y):
            smooth = np.convolve(y, np.ones(window) / window, mode="valid")
            ax_train.plot(x[window - 1:], smooth, label=row["agent"])
        evals = row["evaluations"]
        steps = sorted({e["env_step"] for e in evals})
        means = [np.mean([e["score"] for e in evals if e["env_step"] == s]) for s in steps]
        ax_eval.plot(steps, means, marker="o", label=row["agent"])
    for ax, title in ((ax_train, "training games (raw score, moving mean)"),
                      (ax_eval, "greedy evaluation (mean over seeds)")):
        ax.axhline(random["mean"], color="gray", ls="--", label="uniform random")
        ax.axhspan(*random["ci95"], color="gray", alpha=0.2)
        ax.set_xlabel("env steps per seed")
        ax.set_title(f"{game}: {title}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--agents", nargs="+", default=["dqn", "hyperagent"])
    parser.add_argument("--steps", type=int, default=40_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--envs-per-seed", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--update-every", type=int, default=4,
                        help="env steps per gradient step, every agent")
    parser.add_argument("--epsilon-decay-steps", type=int, default=20_000,
                        help="dqn: epsilon 1 -> 0.01 over these env steps per seed")
    parser.add_argument("--evaluations", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=4)
    parser.add_argument("--final-eval-episodes", type=int, default=16)
    parser.add_argument("--random-episodes", type=int, default=40)
    parser.add_argument("--eval-max-steps", type=int, default=2500,
                        help="agent steps per evaluation game (a greedy policy that never "
                             "presses FIRE idles until this cap)")
    parser.add_argument("--out-dir", default=OUT_DIR)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    for name in args.agents:
        path = os.path.join(args.out_dir, f"{name}.json")
        if os.path.exists(path):
            print(f"{name}: done, skipping ({path})")
            with open(path) as f:
                rows.append(json.load(f))
            continue
        row = run_agent(name, args)
        with open(path, "w") as f:
            json.dump(row, f, indent=1)
        rows.append(row)
    random = bootstrap_mean(np.asarray(policy_scores(args.game, args.random_episodes,
                                                     args.seed + 40_000, args.eval_max_steps)))
    summary = {
        "game": args.game, "backend": "envpool", "device": str(jax.devices()[0]),
        "command": "python benchmarks/atari_learning.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items() if k != "out_dir"),
        "protocol": "final policy, greedy, no life loss, no clipping, fresh index per game, "
                    f"{args.eval_max_steps}-step cap; intervals: 95% bootstrap over games",
        "random_policy": random,
        "agents": {r["agent"]: {k: r[k] for k in (
            "steps_per_seed", "seeds", "envs_per_seed", "config_overrides", "train_time_s",
            "env_steps_per_s", "training_first_fifth", "training_last_fifth", "final_eval",
            "final_eval_per_seed", "best")}
            | {"final_above_random": _above(r["final_eval"], random),
               "training_above_random": _above(r["training_last_fifth"], random)}
            for r in rows},
    }
    out = os.path.join(os.path.dirname(args.out_dir.rstrip("/")), "atari_learning.json")
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)
    plot(rows, random, out.replace(".json", ".png"), args.game)
    print(json.dumps({k: v for k, v in summary.items() if k != "agents"}, indent=1))
    for name, a in summary["agents"].items():
        print(name, "final", a["final_eval"], "last fifth", a["training_last_fifth"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
