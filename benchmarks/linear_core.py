"""Speed of the linear cores: Ensemble++ vs exact Thompson sampling vs the O(d^2 M) recompute.

Per update and per sample (microseconds, median of repeats), for d in {100, 1000, 4000} and
M in {16, 64}:

- ensemble_pp: incremental factor update O(d^2 + dM), sample O(dM)
  (hyperx.linear.ensemble_pp_posterior).
- exact_ts_sqrt: exact TS with a maintained square-root factor, update O(d^2), sample O(d^2)
  (hyperx.linear.exact_posterior).
- exact_ts_refactor: exact TS re-factorising each step, update O(d^2) (gaussian_update),
  sample O(d^3) (a Cholesky of Sigma per draw).
- recompute: the reference code's A_t = Sigma_t P_t, update O(d^2 M), sample O(dM)
  (hyperx.linear.ensemble_pp_recompute).

Each measurement is one jitted ``lax.scan`` over n steps (compiled and run once first), timed
with ``block_until_ready``; the per-step time is the median over repeats divided by n, and the
minimum is recorded too. The ratios use the minima: on a shared machine a neighbour's burst
inflates some repeats (a first full run here showed a 13x jump of one median that a rerun did
not reproduce), and the minimum is the steadier estimate of the code's own cost.

    python benchmarks/linear_core.py            # full grid (the lead's run)
    python benchmarks/linear_core.py --quick    # d in {50, 100}: a smoke test of the script
    python benchmarks/linear_core.py --dims 1000 --ms 64 --out /tmp/lc   # one grid point
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from hyperx.linear import (
    ensemble_pp_posterior,
    ensemble_pp_recompute,
    exact_posterior,
    gaussian_update,
)

RESULTS = Path(__file__).resolve().parent / "results"
NOISE_STD = 0.1
METHODS = ("ensemble_pp", "exact_ts_sqrt", "exact_ts_refactor", "recompute")
TARGET = {"d": 1000, "M": 64, "speedup": 30.0}


def _refactor_model(dim: int):
    """Exact TS without a maintained factor: (mu, Sigma) updates, a Cholesky per sample."""
    exact = exact_posterior(dim, noise_std=NOISE_STD)

    def init(key):
        state = exact.init(key)
        return state.mu, state.sigma

    def update(state, key, x, y):
        del key
        return gaussian_update(*state, x, y, noise_std=NOISE_STD)

    def sample(state, key):
        mu, sigma = state
        return mu + jnp.linalg.cholesky(sigma) @ jax.random.normal(key, mu.shape)

    return init, update, sample


def _model(method: str, dim: int, m: int):
    if method == "exact_ts_refactor":
        return _refactor_model(dim)
    model = {"ensemble_pp": lambda: ensemble_pp_posterior(dim, m, noise_std=NOISE_STD),
             "exact_ts_sqrt": lambda: exact_posterior(dim, noise_std=NOISE_STD),
             "recompute": lambda: ensemble_pp_recompute(dim, m, noise_std=NOISE_STD)}[method]()
    return model.init, model.update, model.sample


def _steps(method: str, kind: str, dim: int, m: int, quick: bool) -> int:
    """Scan length giving roughly 1e9 flop-equivalents per timed run (3 <= n <= 2000)."""
    if kind == "sample" and method == "exact_ts_refactor":
        cost = dim**3 / 3
    elif kind == "update" and method == "recompute":
        cost = 2 * dim**2 * m
    elif kind == "sample" and method in ("ensemble_pp", "recompute"):
        cost = 2 * dim * m
    else:
        cost = 8 * dim**2
    budget = 2e8 if quick else 1e9
    return int(min(2000, max(3, budget // cost)))


def _seconds(fn, args, repeats: int) -> tuple[float, float]:
    """(median, min) wall time of ``fn(*args)`` after a compile-and-warm-up call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def measure(method: str, dim: int, m: int, repeats: int, quick: bool) -> dict:
    """Per-update and per-sample times (microseconds) of one method at (d, M)."""
    init, update, sample = _model(method, dim, m)
    key_init, key_x, key_run = jax.random.split(jax.random.key(0), 3)
    state = init(key_init)
    n_up = _steps(method, "update", dim, m, quick)
    xs = jax.random.normal(key_x, (n_up, dim), jnp.float32) / jnp.sqrt(dim)
    ys = xs.sum(-1)

    @jax.jit
    def run_updates(state, key):
        def step(s, inp):
            return update(s, *inp), None

        keys = jax.random.split(key, n_up)
        return jax.lax.scan(step, state, (keys, xs, ys))[0]

    state = run_updates(state, key_run)
    n_smp = _steps(method, "sample", dim, m, quick)

    @jax.jit
    def run_samples(state, key):
        def step(acc, k):
            return acc + sample(state, k), None

        return jax.lax.scan(step, jnp.zeros(dim), jax.random.split(key, n_smp))[0]

    t_up = _seconds(run_updates, (state, key_run), repeats)
    t_smp = _seconds(run_samples, (state, key_run), repeats)
    return {"method": method, "d": dim, "M": m,
            "update_us": 1e6 * t_up[0] / n_up, "sample_us": 1e6 * t_smp[0] / n_smp,
            "update_us_min": 1e6 * t_up[1] / n_up, "sample_us_min": 1e6 * t_smp[1] / n_smp,
            "n_update_steps": n_up, "n_sample_steps": n_smp}


def ratios(rows: list[dict]) -> list[dict]:
    """Speed-ups of Ensemble++ over the recompute and of the maintained factor over refactoring."""
    by = {(r["method"], r["d"], r["M"]): r for r in rows}
    out = []
    for d, m in sorted({(r["d"], r["M"]) for r in rows}):
        epp, rec = by[("ensemble_pp", d, m)], by[("recompute", d, m)]
        sq, rf = by[("exact_ts_sqrt", d, m)], by[("exact_ts_refactor", d, m)]
        step = lambda r: r["update_us_min"] + r["sample_us_min"]
        out.append({"d": d, "M": m,
                    "recompute_over_ensemble_pp_update": (rec["update_us_min"]
                                                          / epp["update_us_min"]),
                    "recompute_over_ensemble_pp_step": step(rec) / step(epp),
                    "exact_sqrt_over_ensemble_pp_step": step(sq) / step(epp),
                    "refactor_over_sqrt_sample": rf["sample_us_min"] / sq["sample_us_min"]})
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, kind in zip(axes, ("update_us", "sample_us"), strict=True):
        for color, method in enumerate(METHODS):
            exact = method.startswith("exact")
            for m, style in zip(sorted({r["M"] for r in rows}), ("-o", "--s"), strict=False):
                if exact and style != "-o":
                    continue
                pts = sorted((r["d"], r[kind]) for r in rows
                             if r["method"] == method and r["M"] == m)
                ax.plot(*zip(*pts, strict=True), style, color=f"C{color}",
                        label=method if exact else f"{method} M={m}")
        ax.set(xscale="log", yscale="log", xlabel="d",
               ylabel=f"time per {kind.split('_')[0]} (us)", title=kind.split("_")[0])
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"linear cores on {jax.devices()[0].device_kind} (jax {jax.__version__})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small d only (script check)")
    parser.add_argument("--dims", type=int, nargs="+", help="override the d grid")
    parser.add_argument("--ms", type=int, nargs="+", help="override the M grid")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    dims, ms = ((50, 100), (16, 64)) if args.quick else ((100, 1000, 4000), (16, 64))
    dims, ms = tuple(args.dims or dims), tuple(args.ms or ms)
    repeats = args.repeats or (3 if args.quick else 9)
    rows, start = [], time.perf_counter()
    for dim in dims:
        for m in ms:
            for method in METHODS:
                if method.startswith("exact") and m != ms[0]:
                    rows.append({**next(r for r in rows if r["method"] == method
                                        and r["d"] == dim), "M": m})
                    continue
                rows.append(measure(method, dim, m, repeats, args.quick))
                r = rows[-1]
                print(f"d={dim:5d} M={m:3d} {method:18s} update {r['update_us']:12.1f} us"
                      f"  sample {r['sample_us']:12.1f} us", flush=True)
    rat = ratios(rows)
    target = next((r for r in rat if (r["d"], r["M"]) == (TARGET["d"], TARGET["M"])), None)
    result = {
        "benchmark": "linear_core", "quick": args.quick, "repeats": repeats,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "jax_version": jax.__version__, "device": str(jax.devices()[0]),
        "device_kind": jax.devices()[0].device_kind, "platform": platform.platform(),
        "noise_std": NOISE_STD, "wall_seconds": time.perf_counter() - start,
        "results": rows, "ratios": rat,
        "target": {**TARGET, "measured_update_speedup":
                   None if target is None else target["recompute_over_ensemble_pp_update"],
                   "met": None if target is None
                   else target["recompute_over_ensemble_pp_update"] >= TARGET["speedup"]},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "linear_core.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, args.out / "linear_core.png")
    for r in rat:
        print(f"d={r['d']:5d} M={r['M']:3d} recompute/ensemble++ update "
              f"{r['recompute_over_ensemble_pp_update']:7.1f}x  step "
              f"{r['recompute_over_ensemble_pp_step']:7.1f}x  refactor/sqrt sample "
              f"{r['refactor_over_sqrt_sample']:7.1f}x")
    print(f"wrote {args.out / 'linear_core.json'} in {result['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
