"""GP-MW's traffic-routing experiment (Sessa et al., NeurIPS 2019, section 5.2, Figure 3) on the
Sioux Falls network, ours beside the numbers the authors' repository stores.

The authors' setting (sessap/noregretgames, Traffic_Routing/Repeated_Routing.py): 528 players
(OD pairs), up to 5 shortest paths each, BPR edge costs, T = 100 rounds; a random subset of
``n`` players learns (the others take their shortest path), with noise ``sigma_i = 0.001 L_i``;
Hedge (full information), Exp3.P (``beta = sqrt(ln K / (T K))``, our ``delta = 1``) and GP-MW
(polynomial kernel of degree 6 fitted by maximum likelihood, ``beta_t = 2``); measured: the
controlled players' time-averaged regret ``R_i(T) / T`` (mean over players) and the mean relative
delay of the edges. They draw the subsets 10 times (nested: 5, then 5 more for 10, ...) and play
each 10 times. We add GP-MW on Ensemble++ (separable polynomial features of degree 4, M = 16),
and the delay of a pure Nash equilibrium among the controlled players (best-response dynamics).

Ours: ``--draws`` nested subsets (draw r uses ``numpy.random.default_rng(r)``) of each size in
``--counts``, ``--seeds`` seeds each, all seeds of a subset in one vmapped ``lax.scan``; means
with 95% Student-t intervals over draws (each draw's value is its mean over seeds and players).
Our kernel fit uses 100 random joint actions and 100 Adam steps (the authors': 199 and L-BFGS),
see ``hyperx.games.routing_play.fit_poly_kernel``. Our path sets can differ from the authors'
(networkx's) by the order of equal-length paths (17 of 528 players get another 5th path).

``--authors-dir``: a checkout of sessap/noregretgames (outside this repository; ``fetch`` it);
its ``Traffic_Routing/Saved_computations/*.pckl`` (10 subsets x 10 runs, their means per subset)
give the authors' numbers; without it the authors' section of the previous results file is kept.

Writes ``results/games_routing.json`` and ``.png``.

    PYTHONPATH=. .venv/bin/python benchmarks/games_routing.py --authors-dir /path/to/noregretgames
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np
from atari_parity import t_interval

from hyperx.games import routing_play as rp
from hyperx.games.routing import best_response_equilibrium, sioux_falls

RESULTS = Path(__file__).resolve().parent / "results"
AUTHORS = {"hedge": "Hedge", "exp3": "EXP3P", "gp_mw": "GPMW_degree6"}
POINTS = (10, 50, 100)
"""Rounds t at which the time-averaged regret is reported (1-based), with the horizon."""


def points(horizon: int) -> list[int]:
    return sorted({t for t in POINTS if t <= horizon} | {horizon})


def authors_numbers(root: Path, counts: list[int]) -> dict:
    """Per learner and subset size: the stored time-averaged regret and delay at T (mean and
    95% interval over the authors' 10 subsets)."""
    out: dict = {}
    folder = root / "Traffic_Routing" / "Saved_computations"
    for name, stem in AUTHORS.items():
        for n in counts:
            files = sorted(folder.glob(f"store_{stem}_controlled_{n}_run_*.pckl"))
            if not files:
                continue
            runs = [pickle.loads(f.read_bytes()) for f in files]
            regret = np.array([np.asarray(r[1], np.float64) for r in runs])   # (10, T)
            delay = np.array([np.asarray(r[3], np.float64) for r in runs])
            out.setdefault(name, {})[str(n)] = {
                "regret": {str(t): t_interval(list(regret[:, t - 1])) for t in POINTS},
                "delay_final": t_interval(list(delay[:, -1])),
                "subsets": len(files)}
    return out


def draw_subsets(num_players: int, counts: list[int], draw: int) -> dict[int, np.ndarray]:
    """Nested random subsets of the given sizes (the authors grow one subset)."""
    order = np.random.default_rng(draw).permutation(num_players)
    return {n: np.sort(order[:n]) for n in counts}


def run(args: argparse.Namespace) -> dict:
    game = sioux_falls()
    ours: dict = {name: {str(n): [] for n in args.counts} for name in args.learners}
    equilibria: dict = {str(n): [] for n in args.counts}
    for draw in range(args.draws):
        for n, controlled in draw_subsets(game.num_players, args.counts, draw).items():
            key = jax.random.fold_in(jax.random.key(args.seed), draw * 1000 + n)
            k_setting, k_fit, k_play = jax.random.split(key, 3)
            s = rp.setting(game, controlled, args.horizon, k_setting, samples=args.samples)
            movable = np.zeros(game.num_players, bool)
            movable[controlled] = True
            eq = best_response_equilibrium(game, movable)
            equilibria[str(n)].append({"delay": float(eq.relative_delay),
                                       "total_travel_time": float(eq.total_travel_time),
                                       "converged": bool(eq.converged),
                                       "sweeps": int(eq.sweeps)})
            keys = jax.random.split(k_play, args.seeds)
            for name in args.learners:
                start = time.perf_counter()
                kwargs = {"points": args.fit_points, "steps": args.fit_steps} \
                    if name == "gp_mw" else {}
                pop = rp.make_population(name, game, s, k_fit, **kwargs)
                rounds = rp.play_routing(game, s, pop, keys)
                seconds = time.perf_counter() - start
                t = np.arange(1, args.horizon + 1)
                avg = (rounds.regret / t[None, :, None]).mean(axis=(0, 2))
                ours[name][str(n)].append({
                    "regret_curve": avg.tolist(),
                    "delay_curve": rounds.relative_delay.mean(0).tolist(),
                    "total_travel_time_final": float(rounds.total_travel_time[:, -1].mean()),
                    "seconds": seconds})
                print(f"draw {draw} n={n} {name}: R(T)/T {avg[-1]:.1f}, delay "
                      f"{rounds.relative_delay[:, -1].mean():.3f} (eq {eq.relative_delay:.3f}), "
                      f"{seconds:.0f} s", flush=True)
    return {"ours": ours, "equilibria": equilibria}


def summarise(raw: dict, horizon: int) -> dict:
    out: dict = {}
    for name, by_n in raw["ours"].items():
        for n, draws in by_n.items():
            out.setdefault(name, {})[n] = {
                "regret": {str(t): t_interval([d["regret_curve"][t - 1] for d in draws])
                           for t in points(horizon)},
                "delay_final": t_interval([d["delay_curve"][-1] for d in draws]),
                "seconds_per_subset": float(np.mean([d["seconds"] for d in draws]))}
    eq = {n: {"delay": t_interval([d["delay"] for d in draws]),
              "all_converged": all(d["converged"] for d in draws)}
          for n, draws in raw["equilibria"].items()}
    return {"ours": out, "equilibrium": eq}


def plot(payload: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = payload["counts"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, by_n in payload["summary"]["ours"].items():
        y = [by_n[str(n)]["regret"][str(payload["horizon"])]["mean"] for n in counts]
        axes[0].plot(counts, y, "o-", label=f"ours {name}")
        axes[1].plot(counts, [by_n[str(n)]["delay_final"]["mean"] for n in counts], "o-",
                     label=f"ours {name}")
    for name, by_n in (payload.get("authors") or {}).items():
        ns = [n for n in counts if str(n) in by_n]
        axes[0].plot(ns, [by_n[str(n)]["regret"]["100"]["mean"] for n in ns],
                     "x--", label=f"authors {name}")
        axes[1].plot(ns, [by_n[str(n)]["delay_final"]["mean"] for n in ns], "x--",
                     label=f"authors {name}")
    eq = payload["summary"]["equilibrium"]
    axes[1].plot(counts, [eq[str(n)]["delay"]["mean"] for n in counts], "k:", label="equilibrium")
    axes[0].set(xlabel="controlled players", ylabel="time-averaged regret at T",
                title="Sioux Falls, T = 100")
    axes[1].set(xlabel="controlled players", ylabel="mean relative delay at T")
    for ax in axes:
        ax.set_xscale("log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", type=int, nargs="+", default=[5, 20, 50])
    p.add_argument("--draws", type=int, default=4)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--horizon", type=int, default=100)
    p.add_argument("--samples", type=int, default=10000, help="random plays for L_i")
    p.add_argument("--fit-points", type=int, default=100)
    p.add_argument("--fit-steps", type=int, default=100)
    p.add_argument("--learners", nargs="+", default=list(rp.ROUTING_LEARNERS),
                   choices=rp.ROUTING_LEARNERS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--authors-dir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.draws < 2:
        p.error(f"--draws: expected at least 2 (the intervals are over draws), got {args.draws}")
    raw = run(args)
    out = args.out / "games_routing.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    authors = (authors_numbers(args.authors_dir, args.counts) if args.authors_dir
               else previous.get("authors"))
    payload = {"counts": args.counts, "draws": args.draws, "seeds": args.seeds,
               "horizon": args.horizon, "fit": {"points": args.fit_points,
                                                "steps": args.fit_steps},
               "summary": summarise(raw, args.horizon), "authors": authors, "raw": raw,
               "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
               "machine": f"{platform.machine()} CPU, 2 cores shared with other jobs",
               "jax": jax.__version__}
    args.out.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    plot(payload, str(out.with_suffix(".png")))
    print(f"wrote {out} and .png", flush=True)


if __name__ == "__main__":
    main()
