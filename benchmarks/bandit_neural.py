"""Neural bandit benchmark: neural Ensemble++ against the neural baselines.

Games (Li et al., Scalable Exploration via Ensemble++, arXiv:2407.13195; hyperx.envs.bandits):
``quadratic`` (mu(x) = 0.01 x^T G G^T x, d = 100) and ``neural_classification`` (a random frozen
MLP's class-1 probability, Bernoulli rewards, d = 100); each round offers 50 arms drawn from a
per-seed pool of 1000 unit-sphere candidates, as the authors' code does. Learners
(hyperx.bandits.neural, each with the game's preset of the reference code): neural Ensemble++,
Ensemble+, epinet, HyperAgent, NeuralTS, NeuralUCB, epsilon-greedy, and uniform play.

Every learner runs ``--seeds`` seeds (common random numbers: seed s is the same problem for every
learner) as one compiled ``lax.scan`` vmapped over seeds (hyperx.experiment.run_bandit).

The quadratic preset's prior scale 5 (posterior scale 1) makes neural Ensemble++ explore for
thousands of rounds: the trainable factor must grow to cancel a prior term that dwarfs the
reward gaps, at Adam's 1e-4 per step. So the benchmark also runs
``neural_ensemble_pp_selected``: the (prior, posterior) scale of SCALE_GRID with the lowest mean
final regret on ``--tune-seeds`` held-out seeds (base seed 1000, disjoint from the evaluation
seeds 0..S-1), reported with the whole selection sweep. The other learners keep their presets.

Outputs: ``results/bandit_neural.json`` (per game and learner: mean final cumulative expected
regret with its normal 95% interval, sd, per-seed values, mean curve at log-spaced checkpoints,
compile and run times; the prior-scale selection) and ``results/bandit_neural.png`` (mean regret
vs t with 95% bands).

``--throughput`` measures speed instead: every neural learner, with the game's preset, runs
S seeds (``--throughput-seeds``, default 1 16 64) as ONE compiled program (``run_bandit`` with
``group_size=None``: one ``vmap`` over all S seeds inside one ``lax.scan``), and the script
records seed-rounds per second, ``S T / run time``, the run time taken after compilation; the
compile time is reported separately. Vmapped seeds train only on the rounds where training is
due (``hyperx.lockstep.lockstep_cond``), so a preset that trains every 10 rounds
(``neural_classification``) is not charged for training every round. Writes
``results/bandit_neural_throughput.json`` (``bandit_neural.json`` is left alone).

    python benchmarks/bandit_neural.py            # T = 1500, 20 seeds (the lead's run, about
                                                  # 30 min alone on 2 CPU cores)
    python benchmarks/bandit_neural.py --quick    # tiny smoke test of the script (d = 10)
    python benchmarks/bandit_neural.py --learning-rate 1e-3   # faster learning than the reference
    python benchmarks/bandit_neural.py --throughput            # T = 500 at 1, 16, 64 seeds
    python benchmarks/bandit_neural.py --throughput --quick --throughput-seeds 1 2 --out /tmp/t
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np

from hyperx.bandits.baselines import uniform_random
from hyperx.bandits.neural import NEURAL_LEARNERS, PRESETS, neural_learner
from hyperx.bandits.neural_core import NeuralConfig
from hyperx.envs.bandits import make_bandit_env
from hyperx.experiment import run_bandit

RESULTS = Path(__file__).resolve().parent / "results"
GAMES = ("quadratic", "neural_classification")
LEARNERS = (*NEURAL_LEARNERS, "uniform")
TUNED = "neural_ensemble_pp_selected"
SCALE_GRID = ((5.0, 1.0), (1.0, 1.0), (0.3, 0.3), (0.1, 0.1), (0.03, 0.03))
TUNE_SEED = 1000
THROUGHPUT_SEEDS = (1, 16, 64)
THROUGHPUT_HORIZON = 500


def interval(x: np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the normal 95% interval of the mean."""
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else float("nan")
    return float(x.mean()), float(half)


def _record(result) -> dict:
    seeds = result.final_regret.size
    mean, half = interval(result.final_regret)
    return {
        "final_mean": mean, "final_ci95": half,
        "final_sd": float(result.final_regret.std(ddof=1)) if seeds > 1 else float("nan"),
        "final_per_seed": result.final_regret.tolist(),
        "t": result.t.tolist(), "curve_mean": result.regret.mean(0).tolist(),
        "curve_ci95": (1.96 * result.regret.std(0, ddof=1) / np.sqrt(seeds)).tolist()
        if seeds > 1 else None,
        "compile_s": result.compile_time_s, "run_s": result.wall_time_s,
    }


def select_scales(env, game: str, horizon: int, seeds: int, config: NeuralConfig) -> dict:
    """Neural Ensemble++'s (prior, posterior) scale with the lowest mean final regret on
    ``seeds`` held-out seeds (base seed TUNE_SEED, disjoint from the evaluation seeds)."""
    sweep = {}
    for prior, post in SCALE_GRID:
        learner = neural_learner("neural_ensemble_pp", game, config=config, prior_scale=prior,
                                 posterior_scale=post)
        result = run_bandit(env, learner, horizon=horizon, num_seeds=seeds, seed=TUNE_SEED)
        sweep[f"{prior}/{post}"] = float(result.final_regret.mean())
        print(f"{game:22s} tune neural_ensemble_pp prior/posterior {prior}/{post}: "
              f"{sweep[f'{prior}/{post}']:9.2f}", flush=True)
    best = min(sweep, key=sweep.get)
    prior, post = (float(v) for v in best.split("/"))
    return {"held_out_seeds": seeds, "base_seed": TUNE_SEED, "mean_final_regret": sweep,
            "selected": {"prior_scale": prior, "posterior_scale": post}}


def run_game(game: str, horizon: int, seeds: int, dim: int, config: NeuralConfig,
             tune_seeds: int) -> tuple[dict, dict]:
    env = make_bandit_env(game, dim=dim)
    tuning = select_scales(env, game, horizon, tune_seeds, config)
    rows = {}
    for name in (*LEARNERS, TUNED):
        if name == "uniform":
            learner = uniform_random()
        elif name == TUNED:
            learner = neural_learner("neural_ensemble_pp", game, config=config,
                                     **tuning["selected"])
        else:
            learner = neural_learner(name, game, config=config)
        result = run_bandit(env, learner, horizon=horizon, num_seeds=seeds)
        rows[name] = _record(result)
        mean, half = rows[name]["final_mean"], rows[name]["final_ci95"]
        print(f"{game:22s} {name:28s} {mean:9.2f} +- {half:7.2f}   compile "
              f"{result.compile_time_s:5.1f}s run {result.wall_time_s:6.1f}s", flush=True)
    return rows, tuning


def throughput_game(game: str, horizon: int, dim: int, config: NeuralConfig,
                    seed_counts: list[int]) -> dict:
    """Seed-rounds per second of every neural learner at each of ``seed_counts`` seeds, all
    seeds of a count vmapped in one compiled program; compile time apart."""
    env = make_bandit_env(game, dim=dim)
    rows: dict = {}
    for name in NEURAL_LEARNERS:
        learner = neural_learner(name, game, config=config)
        rows[name] = {}
        for seeds in seed_counts:
            result = run_bandit(env, learner, horizon=horizon, num_seeds=seeds, group_size=None)
            rate = seeds * horizon / result.wall_time_s
            rows[name][str(seeds)] = {
                "seeds": seeds, "group_size": result.group_size,
                "compile_s": result.compile_time_s, "run_s": result.wall_time_s,
                "seed_rounds_per_s": rate, "rounds_per_s": horizon / result.wall_time_s}
            print(f"{game:22s} {name:24s} {seeds:4d} seeds: {rate:10.1f} seed-rounds/s   "
                  f"compile {result.compile_time_s:5.1f}s run {result.wall_time_s:6.1f}s",
                  flush=True)
    return rows


def plot(results: dict, path: Path) -> None:
    plt.switch_backend("Agg")
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (game, rows) in zip(axes[0], results.items(), strict=True):
        for name, row in rows.items():
            t, mean = np.asarray(row["t"]), np.asarray(row["curve_mean"])
            ax.plot(t, mean, label=name)
            if row["curve_ci95"] is not None:
                half = np.asarray(row["curve_ci95"])
                ax.fill_between(t, mean - half, mean + half, alpha=0.2)
        ax.set(title=game, xlabel="round t", ylabel="cumulative expected regret")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=None,
                        help=f"rounds T (default 1500; {THROUGHPUT_HORIZON} with --throughput)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--games", nargs="+", default=list(GAMES))
    parser.add_argument("--tune-seeds", type=int, default=8,
                        help="held-out seeds for selecting neural Ensemble++'s prior scale")
    parser.add_argument("--learning-rate", type=float, default=NeuralConfig().learning_rate,
                        help="Adam step size of every neural learner (reference: 1e-4)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: T = 60, 2 seeds, d = 10, a smaller network")
    parser.add_argument("--throughput", action="store_true",
                        help="measure seed-rounds per second instead of regret")
    parser.add_argument("--throughput-seeds", type=int, nargs="+",
                        default=list(THROUGHPUT_SEEDS),
                        help="seed counts of --throughput, each one vmapped program")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    for name in ("horizon", "seeds", "dim", "tune_seeds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer, got {value}")
    if min(args.throughput_seeds) < 1:
        parser.error(f"--throughput-seeds: expected positive integers, got "
                     f"{args.throughput_seeds}")
    config = NeuralConfig(learning_rate=args.learning_rate)
    if args.horizon is None:
        args.horizon = THROUGHPUT_HORIZON if args.throughput else 1500
    if args.quick:
        args.horizon, args.seeds, args.dim, args.tune_seeds = 60, 2, 10, 2
        config = config._replace(hidden=(16, 16), batch_size=16, learning_starts=16)
    meta = {"horizon": args.horizon, "dim": args.dim, "num_arms": 50, "num_candidates": 1000,
            "config": config._asdict(), "jax": jax.__version__, "platform": platform.platform(),
            "devices": [str(d) for d in jax.devices()]}
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.throughput:
        results = {game: throughput_game(game, args.horizon, args.dim, config,
                                         args.throughput_seeds) for game in args.games}
        stem = "bandit_neural_throughput" + ("_quick" if args.quick else "")
        meta.update(seed_counts=args.throughput_seeds, total_s=time.perf_counter() - start,
                    presets={game: PRESETS[game] for game in args.games},
                    measure="seed_rounds_per_s = seeds * horizon / run_s; run_s after "
                            "compilation (compile_s apart); all seeds in one vmapped program")
        (args.out / f"{stem}.json").write_text(json.dumps(
            {"meta": meta, "results": results}, indent=1))
        print(f"total {meta['total_s']:.0f}s -> {args.out / stem}.json")
        return
    results, tuning = {}, {}
    for game in args.games:
        results[game], tuning[game] = run_game(game, args.horizon, args.seeds, args.dim, config,
                                               args.tune_seeds)
    total = time.perf_counter() - start
    stem = "bandit_neural_quick" if args.quick else "bandit_neural"
    meta.update(seeds=args.seeds, total_s=total)
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"meta": meta, "prior_scale_selection": tuning, "results": results}, indent=1))
    plot(results, args.out / f"{stem}.png")
    print(f"total {total:.0f}s -> {args.out / stem}.json/.png")


if __name__ == "__main__":
    main()
