"""Throughput of the vmapped regret sweep vs a per-seed NumPy loop and the memory-bandwidth floor.

For exact Thompson sampling and linear Ensemble++ (gaussian index, M = 16) on Russo & Van Roy's
game at the two sizes of the ensemble-size study (d = 50, K = 1000 and d = 100, K = 10,000):

- ``jax``: seed-rounds per second of :func:`hyperx.bandits.runner.run_bandit` (seeds vmapped in
  one compiled ``lax.scan``; compile time excluded, reported separately), both with every seed
  in one pass (``jax_one_pass``) and with the default cache-sized seed groups (``jax``: as many
  seeds per pass as fit in 4 MiB of run state, ``group_size="auto"``), and their ratio;
- ``numpy``: the same learner and game as a plain NumPy float32 loop, one seed after another
  (the reference implementation's structure), and the ratio jax / numpy;
- ``floor``: every round must read the K x d arm features of every seed to score the arms
  (4 K d bytes per seed-round; the posterior is O(d^2 + dM) and smaller). With the memory
  bandwidth B measured in the same run (the faster of a large NumPy and a large JAX float32
  sum), the bandwidth-bound ceiling is B / (4 K d) seed-rounds per second; ``fraction_of_floor``
  says how close the sweep gets. When a pass's arms fit in cache (the point of the seed
  groups), the sweep can exceed it.

    python benchmarks/bandit_throughput.py            # full sizes (the lead's run)
    python benchmarks/bandit_throughput.py --quick    # tiny sizes: a smoke test

Writes benchmarks/results/bandit_throughput.json (``--out`` to change the folder).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from hyperx.bandits.linear import ensemble_pp, exact_ts
from hyperx.bandits.runner import run_bandit
from hyperx.envs.bandits import russo

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {"d50_k1000": (50, 1000), "d100_k10000": (100, 10_000)}
QUICK_SIZES = {"quick_d8_k64": (8, 64)}
M = 16
PRIOR_VAR, NOISE_STD, ARM_BOUND = 10.0, 1.0, 1 / math.sqrt(5)


def numpy_seed_steps_per_s(learner: str, dim: int, arms: int, steps: int, seeds: int) -> float:
    """Seed-rounds per second of a per-seed NumPy loop (float32) of ``learner`` on the game."""
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(seeds):
        theta_star = math.sqrt(PRIOR_VAR) * rng.standard_normal(dim).astype(np.float32)
        x_arms = rng.uniform(-ARM_BOUND, ARM_BOUND, (arms, dim)).astype(np.float32)
        means = x_arms @ theta_star
        mu = np.zeros(dim, np.float32)
        sigma = PRIOR_VAR * np.eye(dim, dtype=np.float32)
        root = math.sqrt(PRIOR_VAR) * np.eye(dim, dtype=np.float32)
        if learner == "ensemble_pp":
            rows = rng.standard_normal((dim, M)).astype(np.float32)
            root = math.sqrt(PRIOR_VAR) * rows / np.linalg.norm(rows, axis=1, keepdims=True)
        for _ in range(steps):
            z = rng.standard_normal(root.shape[1]).astype(np.float32)
            scores = x_arms @ (mu + root @ z)
            arm = int(rng.choice(np.flatnonzero(scores == scores.max())))
            x = x_arms[arm]
            y = means[arm] + NOISE_STD * rng.standard_normal()
            v = sigma @ x
            a = x @ v + NOISE_STD**2
            k = v / a
            mu = mu + k * (y - x @ mu)
            if learner == "ensemble_pp":
                u = rng.standard_normal(M).astype(np.float32)
                root = root + np.outer(k, NOISE_STD * u / np.linalg.norm(u) - x @ root)
            else:
                f = root.T @ x
                beta = 1.0 / (a + NOISE_STD * math.sqrt(a))
                root = root - beta * np.outer(root @ f, f)
            w = v / math.sqrt(a)
            sigma = sigma - np.outer(w, w)
    return seeds * steps / (time.perf_counter() - start)


def bandwidth_bytes_per_s(num_bytes: int, repeats: int = 5) -> dict[str, float]:
    """Read bandwidth from a large float32 sum, NumPy and jitted JAX (best of ``repeats``)."""
    host = np.ones(num_bytes // 4, np.float32)
    dev = jnp.asarray(host)
    total = jax.jit(jnp.sum)
    total(dev).block_until_ready()
    best_np = best_jax = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        host.sum()
        best_np = min(best_np, time.perf_counter() - start)
        start = time.perf_counter()
        total(dev).block_until_ready()
        best_jax = min(best_jax, time.perf_counter() - start)
    return {"numpy": num_bytes / best_np, "jax": num_bytes / best_jax, "bytes": num_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--sizes", default=None, help="comma list of " + ", ".join(SIZES))
    parser.add_argument("--seeds", type=int, default=None, help="vmapped seeds (default 200)")
    parser.add_argument("--steps", type=int, default=None, help="rounds per run (default 500)")
    parser.add_argument("--numpy-steps", type=int, default=None,
                        help="rounds of the NumPy loop per seed (default 200)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.sizes:
        sizes = {k: SIZES[k] for k in args.sizes.split(",")}
    seeds = args.seeds or (4 if args.quick else 200)
    steps = args.steps or (50 if args.quick else 500)
    np_steps = args.numpy_steps or (50 if args.quick else 200)
    bandwidth = bandwidth_bytes_per_s((16 if args.quick else 1024) * 2**20)
    peak = max(bandwidth["numpy"], bandwidth["jax"])
    print(f"read bandwidth: numpy {bandwidth['numpy'] / 1e9:.1f} GB/s, "
          f"jax {bandwidth['jax'] / 1e9:.1f} GB/s")

    rows = []
    for size, (dim, arms) in sizes.items():
        env = russo(dim=dim, num_arms=arms)
        for name, learner in (("exact_ts", exact_ts()), (f"ensemble_pp_M{M}", ensemble_pp(M))):
            one = run_bandit(env, learner, horizon=steps, num_seeds=seeds, checkpoints=[steps],
                             group_size=None)
            res = run_bandit(env, learner, horizon=steps, num_seeds=seeds, checkpoints=[steps])
            np_rate = numpy_seed_steps_per_s(name.split("_M")[0], dim, arms, np_steps, 2)
            floor = peak / (4 * arms * dim)
            row = {"size": size, "learner": name, "dim": dim, "arms": arms, "seeds": seeds,
                   "steps": steps, "compile_time_s": res.compile_time_s,
                   "run_time_s": res.wall_time_s, "jax_seed_steps_per_s": res.run_steps_per_s,
                   "group_size": res.group_size,
                   "jax_one_pass_seed_steps_per_s": one.run_steps_per_s,
                   "groups_vs_one_pass": res.run_steps_per_s / one.run_steps_per_s,
                   "numpy_seed_steps_per_s": np_rate,
                   "speedup_vs_numpy": res.run_steps_per_s / np_rate,
                   "arm_bytes_per_seed_step": 4 * arms * dim,
                   "arm_bytes_all_seeds": 4 * arms * dim * seeds,
                   "floor_seed_steps_per_s": floor,
                   "fraction_of_floor": res.run_steps_per_s / floor}
            rows.append(row)
            print(f"{size:>14} {name:<16} jax {row['jax_seed_steps_per_s']:10.3g}/s "
                  f"(groups of {res.group_size}; one pass {one.run_steps_per_s:9.3g}/s)  numpy "
                  f"{np_rate:9.3g}/s  x{row['speedup_vs_numpy']:6.1f}  "
                  f"{100 * row['fraction_of_floor']:5.1f}% of the bandwidth floor", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    name = "bandit_throughput_quick.json" if args.quick else "bandit_throughput.json"
    (args.out / name).write_text(json.dumps(
        {"device": str(jax.devices()[0]), "platform": platform.platform(),
         "bandwidth_bytes_per_s": bandwidth, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
