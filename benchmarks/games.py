"""GP-MW's repeated-matrix-game experiment (Sessa et al., NeurIPS 2019, Figure 1), ours beside the
authors' code.

The authors' setting (sessap/noregretgames, Repeated_MatrixGames/Repeated_matrix_games.py): two
players, K = 30 actions each, T = 200 rounds, noise sigma = 1; each run draws a zero-sum game
whose row payoff is the posterior mean of a GP sample on the 30 x 30 grid of joint actions
(squared-exponential kernel, variance 1, lengthscale K/5 = 6); player 1 runs Hedge (full
information), Exp3.P or GP-MW (beta_t = 2) against a uniformly random player 2 or (GP-MW)
against Exp3.P; the measure is player 1's time-averaged regret R_1(t) / t, averaged over 10 runs.
We add GP-MW on Ensemble++ (M = 16) in place of the GP.

* Ours: ``--games`` (default 100) games per pair, all seeds of a pair in one vmapped
  ``lax.scan``; means with 95% Student-t intervals over games at t = 10, 50, 100, 200.
* The authors' numbers: ``--authors-dir`` (a checkout of sessap/noregretgames, outside this
  repository; ``fetch`` it) reads the curves their repository stores (``stored_*.pckl``, 10 runs,
  mean and standard deviation) and runs their own ``RunGame`` (their functions, executed from
  their file) on our first ``--authors-games`` games, so both codes play the same games. Without
  ``--authors-dir`` the authors' section of the previous results file is kept.
* ``--throughput``: seed-rounds per second of our vmapped ``play_seeds`` (GP-MW and Ensemble++
  against Exp3.P) at 1, 100 and 1000 seeds, against a per-seed NumPy loop of the same learners
  (same features, same updates), measured in the same run. Needs the machine to itself.

Writes ``results/games.json`` and ``results/games.png``.

    PYTHONPATH=. .venv/bin/python benchmarks/games.py --authors-dir /path/to/noregretgames
    PYTHONPATH=. .venv/bin/python benchmarks/games.py --throughput
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from atari_parity import t_interval

from hyperx.games import (
    PlayerSpec,
    eigen_features,
    make_learner,
    make_play_seeds,
    play_seeds,
    random_gp_game,
)
from hyperx.games.learners import default_kernel

RESULTS = Path(__file__).resolve().parent / "results"
K, T, SIGMA = 30, 200, 1.0
PAIRS = [("hedge", "random"), ("exp3", "random"), ("gp_mw", "random"),
         ("ensemble_mw", "random"), ("gp_mw", "exp3"), ("ensemble_mw", "exp3")]
AUTHORS_NAMES = {"hedge": "MWU", "exp3": "EXP3", "gp_mw": "GPMW", "random": "random"}
CHECKPOINTS = (10, 50, 100, 200)


def pair_name(pair) -> str:
    return f"{pair[0]}_vs_{pair[1]}"


def make_games(n: int, seed: int) -> jax.Array:
    keys = jax.random.split(jax.random.key(seed), n)
    return jnp.stack([random_gp_game(k, (K, K)) for k in keys])


def players(pair, horizon: int = T):
    return [make_learner(name, PlayerSpec(i, (K, K), horizon, SIGMA))
            for i, name in enumerate(pair)]


def our_regrets(games: jax.Array, seed: int) -> dict:
    out = {}
    keys = jax.random.split(jax.random.key(seed + 1), games.shape[0])
    for pair in PAIRS:
        start = time.perf_counter()
        rounds = play_seeds(games, players(pair), keys, T, noise_std=SIGMA).rounds
        regret = np.asarray(rounds.regret) / np.arange(1, T + 1)[None, :, None]  # R_i(t) / t
        out[pair_name(pair)] = {
            "curve_p1_mean": regret[:, :, 0].mean(0).tolist(),
            "curve_p2_mean": regret[:, :, 1].mean(0).tolist(),
            "p1": {str(t): t_interval(regret[:, t - 1, 0].tolist()) for t in CHECKPOINTS},
            "p2": {str(t): t_interval(regret[:, t - 1, 1].tolist()) for t in CHECKPOINTS},
            "seconds": time.perf_counter() - start,
        }
        print(pair_name(pair), {t: round(out[pair_name(pair)]["p1"][str(t)]["mean"], 4)
                                for t in CHECKPOINTS}, flush=True)
    return out


def authors_stored(directory: Path) -> dict:
    """The curves the authors' repository stores: 10 runs, mean and std of R_i(t) / t."""
    out = {}
    for name in ("stored_against_random.pckl", "stored_GPMW_vs_Exp3.pckl"):
        with open(directory / "Repeated_MatrixGames" / name, "rb") as fh:
            types = pickle.load(fh)
            mean1, std1, mean2, std2 = (pickle.load(fh) for _ in range(4))
        for j, (a, b) in enumerate(types):
            ours = {v: k for k, v in AUTHORS_NAMES.items()}
            key = f"{ours[a]}_vs_{ours[b]}"
            out[key] = {"runs": 10, "file": f"Repeated_MatrixGames/{name}",
                        "p1_mean": {str(t): float(mean1[j][t - 1]) for t in CHECKPOINTS},
                        "p1_std": {str(t): float(std1[j][t - 1]) for t in CHECKPOINTS},
                        "p2_mean": {str(t): float(mean2[j][t - 1]) for t in CHECKPOINTS},
                        "curve_p1_mean": [float(x) for x in mean1[j]]}
    return out


def authors_on_our_games(directory: Path, python: str, games: np.ndarray, seed: int) -> dict:
    """The authors' own ``RunGame`` on our games (``games_authors.py`` under ``python``)."""
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "games.npy", games)
        pairs = [f"{AUTHORS_NAMES[a]}:{AUTHORS_NAMES[b]}" for a, b in PAIRS
                 if a in AUTHORS_NAMES and b in AUTHORS_NAMES]
        subprocess.run([python, str(Path(__file__).with_name("games_authors.py")),
                        "--authors-dir", str(directory), "--games", str(Path(tmp) / "games.npy"),
                        "--pairs", *pairs, "--horizon", str(T), "--sigma", str(SIGMA),
                        "--seed", str(seed), "--out", str(Path(tmp) / "out.json")], check=True)
        raw = json.loads((Path(tmp) / "out.json").read_text())
    ours = {v: k for k, v in AUTHORS_NAMES.items()}
    out = {"games": int(games.shape[0]), "numpy": raw.pop("numpy")}
    for pair, row in raw.items():
        a, b = pair.split(":")
        curves = np.asarray(row["curves"])  # (games, T, 2)
        out[f"{ours[a]}_vs_{ours[b]}"] = {
            "seconds": row["seconds"], "rounds_per_second": curves.shape[0] * T / row["seconds"],
            "p1": {str(t): t_interval(curves[:, t - 1, 0].tolist()) for t in CHECKPOINTS},
            "p2": {str(t): t_interval(curves[:, t - 1, 1].tolist()) for t in CHECKPOINTS},
            "curve_p1_mean": curves[:, :, 0].mean(0).tolist()}
    return out


def our_on_first_games(games: jax.Array, n: int, seed: int) -> dict:
    """Ours on the same first ``n`` games as the authors' run (the same seed keys)."""
    keys = jax.random.split(jax.random.key(seed + 1), games.shape[0])[:n]
    out = {}
    for pair in PAIRS:
        rounds = play_seeds(games[:n], players(pair), keys, T, noise_std=SIGMA).rounds
        regret = np.asarray(rounds.regret) / np.arange(1, T + 1)[None, :, None]
        out[pair_name(pair)] = {"p1": {str(t): t_interval(regret[:, t - 1, 0].tolist())
                                       for t in CHECKPOINTS}}
    return out


def numpy_loop(pair, games: np.ndarray, seed: int) -> float:
    """Per-seed NumPy loop of GP-MW / Ensemble++-MW (player 1) against Exp3.P (player 2), the
    same features and updates as ``hyperx.games``; returns seconds."""
    spec = PlayerSpec(0, (K, K), T, SIGMA)
    table = np.asarray(eigen_features((K, K), default_kernel(spec)).apply(
        None, jnp.asarray(np.indices((K, K)).reshape(2, -1).T)), np.float64).reshape(K, K, -1)
    dim, m = table.shape[-1], 16
    eta_mw = math.sqrt(8 * math.log(K) / T)
    beta3 = math.sqrt(math.log(K / 0.01) / (T * K))
    gamma3 = 1.05 * math.sqrt(math.log(K) * K / T)
    eta3 = 0.95 * math.sqrt(math.log(K) / (T * K))
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for game in games:
        u1 = np.asarray(game[0], np.float64)
        lo1, hi1, lo2, hi2 = u1.min(), u1.max(), -u1.max(), -u1.min()
        log_w, mu, sigma = np.full(K, -math.log(K)), np.zeros(dim), np.eye(dim)
        factor = rng.normal(size=(dim, m))
        factor /= np.linalg.norm(factor, axis=1, keepdims=True)
        est, probs = np.zeros(K), np.full(K, 1.0 / K)
        for _ in range(T):
            x1 = np.exp(log_w)
            a1 = min(int(np.searchsorted(np.cumsum(x1), rng.random() * x1.sum())), K - 1)
            a2 = min(int(np.searchsorted(np.cumsum(probs), rng.random())), K - 1)
            y1 = u1[a1, a2] + SIGMA * rng.normal()
            y2 = -u1[a1, a2] + SIGMA * rng.normal()
            x = table[a1, a2]
            v = sigma @ x
            a = x @ v + SIGMA**2
            gain = v / a
            mu = mu + gain * (y1 - x @ mu)
            if pair[0] == "ensemble_mw":
                u = rng.normal(size=m)
                factor = factor + np.outer(gain, SIGMA * u / np.linalg.norm(u) - x @ factor)
            sigma = sigma - np.outer(v, v) / a
            rows = table[:, a2]
            if pair[0] == "ensemble_mw":
                var = ((rows @ factor) ** 2).sum(-1)
            else:
                var = np.einsum("kd,de,ke->k", rows, sigma, rows)
            ucb = rows @ mu + 2.0 * np.sqrt(np.maximum(var, 0.0))
            log_w = log_w - eta_mw * (1 - np.clip((ucb - lo1) / (hi1 - lo1), 0, 1))
            log_w -= np.log(np.exp(log_w).sum())
            r2 = np.clip((y2 - lo2) / (hi2 - lo2), 0, 1)
            est = est + beta3 / probs
            est[a2] += r2 / probs[a2]
            w = np.exp(eta3 * (est - est.max()))
            probs = (1 - gamma3) * w / w.sum() + gamma3 / K
    return time.perf_counter() - start


def throughput(seed: int) -> dict:
    out = {}
    for pair in (("gp_mw", "exp3"), ("ensemble_mw", "exp3")):
        rows = {}
        for seeds in (1, 100, 1000):
            games = make_games(seeds, seed)
            keys = jax.random.split(jax.random.key(seed + 1), seeds)
            fn = make_play_seeds(players(pair), T, noise_std=SIGMA)
            jax.block_until_ready(fn(games, keys))
            start = time.perf_counter()
            jax.block_until_ready(fn(games, keys))
            seconds = time.perf_counter() - start
            rows[str(seeds)] = {"seconds": seconds, "seed_rounds_per_second": seeds * T / seconds}
        n_np = 5
        seconds = numpy_loop(pair, np.asarray(make_games(n_np, seed)), seed)
        baseline = n_np * T / seconds
        for row in rows.values():
            row["ratio_to_numpy"] = row["seed_rounds_per_second"] / baseline
        out[pair_name(pair)] = {"hyperx": rows, "numpy_per_seed_loop": {
            "games": n_np, "seed_rounds_per_second": baseline}}
        print(pair_name(pair), json.dumps(out[pair_name(pair)]), flush=True)
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    t = np.arange(1, T + 1)
    colours = {"hedge": "C0", "exp3": "C1", "gp_mw": "C2", "ensemble_mw": "C3"}
    for ax, opponent in zip(axes, ("random", "exp3"), strict=True):
        for name, row in result["ours"].items():
            first, second = name.split("_vs_")
            if second != opponent:
                continue
            ax.plot(t, row["curve_p1_mean"], color=colours[first], label=f"{first} (hyperx)",
                    ls="-." if first == "ensemble_mw" else "-")
            stored = result.get("authors_stored", {}).get(name)
            if stored:
                ax.plot(t, stored["curve_p1_mean"], color=colours[first], ls="--",
                        label=f"{first} (authors' stored, 10 runs)")
        ax.set_title(f"player 1 against {opponent}")
        ax.set_xlabel("round t")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("time-averaged regret R_1(t) / t")
    fig.suptitle(f"random zero-sum GP games, K = {K}, sigma = {SIGMA}: "
                 f"mean over {result['games']} games (hyperx)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--authors-dir", type=Path)
    parser.add_argument("--authors-games", type=int, default=10)
    parser.add_argument("--authors-python", default=sys.executable,
                        help="a Python with numpy<1.25, where the authors' code runs")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from --out")
    parser.add_argument("--out", type=Path, default=RESULTS / "games.json")
    args = parser.parse_args()
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    command = "PYTHONPATH=. .venv/bin/python benchmarks/games.py " + " ".join(sys.argv[1:])
    meta = {"machine": platform.processor() or platform.machine(), "jax": jax.__version__}
    if args.plot_only:
        plot(previous, args.out.with_suffix(".png"))
        return
    if args.throughput:
        result = dict(previous)
        result["throughput"] = {"command": command, **meta, **throughput(args.seed)}
    else:
        games = make_games(args.games, args.seed)
        result = {"command": command, **meta, "K": K, "T": T, "sigma": SIGMA,
                  "games": args.games, "seed": args.seed,
                  "ours": our_regrets(games, args.seed)}
        for key in ("authors_stored", "authors_on_our_games", "ours_on_the_same_games",
                    "throughput"):
            if key in previous:
                result[key] = previous[key]
        if args.authors_dir is not None:
            result["authors_stored"] = authors_stored(args.authors_dir)
            first = np.asarray(games[: args.authors_games])
            result["authors_on_our_games"] = authors_on_our_games(
                args.authors_dir, args.authors_python, first, args.seed)
            result["ours_on_the_same_games"] = our_on_first_games(
                games, args.authors_games, args.seed)
        plot(result, args.out.with_suffix(".png"))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
