"""Ensemble++ ensemble-size study on Russo & Van Roy's linear game (the Ensemble++ paper's claim).

Final cumulative expected regret of linear Ensemble++ against its width M, next to exact
Thompson sampling and LinUCB, on the finite-arm linear game (theta* ~ N(0, 10 I), arms
Unif(-1/sqrt(5), 1/sqrt(5))^d fixed per seed, N(0, 1) noise; learners' prior N(0, 10 I)):

- size ``d50_k1000``:   d = 50,  K = 1000,   T = 1000;
- size ``d100_k10000``: d = 100, K = 10,000, T = 2000;

200 seeds each (common random numbers: seed s is the same game for every learner);
M in {1, 2, 4, 8, 16, 32, 64} for the gaussian and coordinate indices and M in {4, 16, 64} for
sphere, scaled_sphere, cube and one_hot. Every cell is one compiled run of all seeds
(:func:`hyperx.bandits.runner.run_bandit`). For each (size, index) the script reports the smallest
M whose mean final regret is within 10% of exact TS's, and for the first size it puts the
reference implementation's numbers (Li et al., *Scalable Exploration via Ensemble++*,
arXiv:2407.13195; the authors' NumPy code, 200 seeds, mean +- sd) beside ours.

Resumable: each finished (size, learner) cell is written to the JSON at once, and a rerun with
the same seed count skips the cells already there for any size of unchanged shape (``--fresh``
starts over); ``--sizes`` runs some sizes and keeps the others' results.

    python benchmarks/bandit_ensemble_size.py            # the full study (the lead's run)
    python benchmarks/bandit_ensemble_size.py --quick    # tiny sizes: a smoke test
    python benchmarks/bandit_ensemble_size.py --sizes d50_k1000 --seeds 50

Writes benchmarks/results/bandit_ensemble_size.json and .png (``--out`` to change the folder).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import jax
import numpy as np

from hyperx.bandits.linear import ensemble_pp, exact_ts, linucb
from hyperx.bandits.runner import run_bandit
from hyperx.envs.bandits import russo

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {"d50_k1000": (50, 1000, 1000), "d100_k10000": (100, 10_000, 2000)}
QUICK_SIZES = {"quick_d5_k20": (5, 20, 50)}
FULL_M = (1, 2, 4, 8, 16, 32, 64)
SHORT_M = (4, 16, 64)
INDEX_GRID = {"gaussian": FULL_M, "coordinate": FULL_M, "sphere": SHORT_M,
              "scaled_sphere": SHORT_M, "cube": SHORT_M, "one_hot": SHORT_M}
REFERENCE = {"size": "d50_k1000", "seeds": 200, "exact_ts": (620.0, 100.0),
             "ensemble_pp_gaussian": {4: (1013.0, 895.0), 16: (636.0, 249.0),
                                      32: (607.0, 104.0)}}
WITHIN = 0.10


def _cells(quick: bool) -> list[tuple[str, str, int | None]]:
    """(learner, index, M) for every cell of one size."""
    grid = {"gaussian": (2, 8), "sphere": (4,)} if quick else INDEX_GRID
    cells = [("exact_ts", "", None), ("linucb", "", None)]
    cells += [("ensemble_pp", index, m) for index, ms in grid.items() for m in ms]
    return cells


def _learner(name: str, index: str, m: int | None):
    if name == "exact_ts":
        return exact_ts()
    if name == "linucb":
        return linucb()
    return ensemble_pp(m, index=index)


def _cell_key(name: str, index: str, m: int | None) -> str:
    return name if m is None else f"{name}:{index}:M={m}"


def _stats(final: np.ndarray) -> dict[str, float]:
    sd = float(final.std(ddof=1)) if final.size > 1 else 0.0
    return {"mean": float(final.mean()), "sd": sd, "median": float(np.median(final)),
            "se": sd / math.sqrt(final.size), "p90": float(np.quantile(final, 0.9))}


def smallest_m_within(cells: dict, tolerance: float = WITHIN) -> dict[str, int | None]:
    """Per index: the smallest M with mean final regret <= (1 + tolerance) x exact TS's."""
    target = (1.0 + tolerance) * cells["exact_ts"]["mean"]
    best: dict[str, int | None] = {}
    for key, cell in cells.items():
        if not key.startswith("ensemble_pp:"):
            continue
        index, m = cell["index"], cell["M"]
        best.setdefault(index, None)
        if cell["mean"] <= target and (best[index] is None or m < best[index]):
            best[index] = m
    return best


def run(sizes: dict, seeds: int, quick: bool, path: Path, fresh: bool) -> dict:
    results = json.loads(path.read_text()) if path.exists() and not fresh else {}
    if results.get("settings", {}).get("seeds") != seeds:
        results = {"settings": {"sizes": {}, "seeds": seeds}, "cells": {}}
    for size, shape in sizes.items():  # a size's finished cells are kept if its shape matches
        if results["settings"]["sizes"].get(size) != list(shape):
            results["settings"]["sizes"][size] = list(shape)
            results["cells"].pop(size, None)
    results.update(reference=REFERENCE | {"ensemble_pp_gaussian": {
        str(k): v for k, v in REFERENCE["ensemble_pp_gaussian"].items()}},
        device=str(jax.devices()[0]), platform=platform.platform())
    for size, (dim, arms, horizon) in sizes.items():
        env = russo(dim=dim, num_arms=arms)
        done = results["cells"].setdefault(size, {})
        for name, index, m in _cells(quick):
            key = _cell_key(name, index, m)
            if key in done:
                continue
            start = time.perf_counter()
            res = run_bandit(env, _learner(name, index, m), horizon=horizon, num_seeds=seeds,
                             seed=0, checkpoints=[horizon])
            done[key] = {"learner": name, "index": index, "M": m,
                         **_stats(res.final_regret), "wall_time_s": time.perf_counter() - start,
                         "compile_time_s": res.compile_time_s,
                         "seed_steps_per_s": res.run_steps_per_s}
            print(f"{size:>14} {key:<32} regret {done[key]['mean']:8.1f} +- "
                  f"{done[key]['sd']:7.1f}  ({done[key]['wall_time_s']:.1f} s)", flush=True)
            path.write_text(json.dumps(results, indent=1) + "\n")
        results.setdefault("smallest_m_within_10pct", {})[size] = smallest_m_within(done)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return results


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results["cells"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.2), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        cells = results["cells"][size]
        by_index: dict[str, list] = {}
        for cell in cells.values():
            if cell["learner"] == "ensemble_pp":
                by_index.setdefault(cell["index"], []).append(cell)
        for index, group in sorted(by_index.items()):
            group.sort(key=lambda c: c["M"])
            ax.errorbar([c["M"] for c in group], [c["mean"] for c in group],
                        yerr=[1.96 * c["se"] for c in group], marker="o", capsize=2,
                        label=f"Ensemble++ ({index})")
        for name, style in (("exact_ts", "k-"), ("linucb", "k:")):
            if name in cells:
                mean, half = cells[name]["mean"], 1.96 * cells[name]["se"]
                ax.axhline(mean, color="k", linestyle=style[1:], label=name)
                ax.axhspan(mean - half, mean + half, color="k", alpha=0.1)
        if size == REFERENCE["size"]:
            ref = REFERENCE["ensemble_pp_gaussian"]
            ax.errorbar(list(ref), [v[0] for v in ref.values()], fmt="s", color="grey",
                        mfc="none", label="reference Ensemble++ (mean; sd bars)",
                        yerr=[v[1] for v in ref.values()], capsize=2)
            ax.axhline(REFERENCE["exact_ts"][0], color="grey", linestyle="--",
                       label="reference exact TS")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("Ensemble++ width M")
        ax.set_ylabel("final cumulative regret (mean, 95% CI)")
        ax.set_title(size)
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--sizes", default=None, help="comma list of " + ", ".join(SIZES))
    parser.add_argument("--seeds", type=int, default=None, help="default 200 (4 with --quick)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--fresh", action="store_true", help="ignore a previous partial run")
    args = parser.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.sizes:
        sizes = {k: SIZES[k] for k in args.sizes.split(",")}
    seeds = args.seeds or (4 if args.quick else 200)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "bandit_ensemble_size_quick" if args.quick else "bandit_ensemble_size"
    results = run(sizes, seeds, args.quick, args.out / f"{name}.json", args.fresh)
    plot(results, args.out / f"{name}.png")
    for size, best in results["smallest_m_within_10pct"].items():
        print(f"{size}: smallest M within 10% of exact TS: {best}")


if __name__ == "__main__":
    main()
