"""Neural bandit benchmark: every neural learner, its exploration knob selected on held-out seeds.

Games (Li et al., Scalable Exploration via Ensemble++, arXiv:2407.13195; hyperx.envs.bandits),
all d = 100 with 50 arms a round drawn from a per-seed pool of 1000 unit-sphere candidates, as
the authors' code does:

* ``quadratic``: mu(x) = 0.01 x^T G G^T x, reward noise N(0, 0.1^2);
* ``neural_regression``: mu(x) = a random frozen MLP d-50-50-1, reward noise N(0, 0.1^2);
* ``neural_classification``: mu(x) = softmax(a random frozen MLP d-50-50-2)_1, Bernoulli reward.

Horizon and seeds. The reference's ``scripts/run_nonlinear.py`` defaults to T = 1000 and its
``start_synthetic.sh`` runs T = 100,000 with 5 seeds. Here T = 1500 on the quadratic and
classification games and T = 1000 (the reference's default) on the regression game, whose
preset takes 10 gradient steps a round (:data:`HORIZONS`), with 20 evaluation seeds
(0..19) and 8 held-out tuning seeds (base seed 1000); T = 100,000 does not fit on 2 CPU cores
(about 65x the rounds of this run: some 80-100 h with the grids below, see docs/bandits.md).

Learners (hyperx.bandits.neural, each with the game's preset of the reference code for its
update schedule): neural Ensemble++, HyperAgent, Ensemble+, epinet, NeuralUCB, NeuralTS,
epsilon-greedy, and uniform play. Every learner that has a prior / posterior scale or an
exploration knob gets the small grid of :data:`GRIDS`; the point with the lowest mean final
regret on the held-out tuning seeds is then run on the evaluation seeds. Uniform play has no
knob. One code path (:func:`run_cell`) does this for every learner alike.

Every run is one compiled ``lax.scan`` vmapped over seeds (hyperx.bandits.runner.run_bandit), with
common random numbers: seed s is the same problem for every learner.

Resumable cells. Each (game, learner) cell is written, when it finishes, to
``results/bandit_neural/<game>__<learner>.json`` (the tuning sweep, the selected point and the
evaluation run: mean final cumulative expected regret with its normal 95% interval, sd,
per-seed values, mean curve at log-spaced checkpoints, times). A cell already on disk with the
same settings is skipped, so the full run can be split across sessions (``--games`` /
``--learners`` pick cells); a cell with other settings is refused, naming the first setting that
differs, unless ``--overwrite``. ``results/bandit_neural.json`` (summary) and
``results/bandit_neural.png`` (mean regret vs t with 95% bands) and ``results/bandit_neural.md``
(the table) are rebuilt from the cells present with the current settings (``--summary``
rebuilds them without running anything).

``--throughput`` measures speed instead: every neural learner, with the game's preset, runs
S seeds (``--throughput-seeds``, default 1 16 64) as ONE compiled program (``run_bandit`` with
``group_size=None``: one ``vmap`` over all S seeds inside one ``lax.scan``), and the script
records seed-rounds per second, ``S T / run time``, the run time taken after compilation; the
compile time is reported separately. Vmapped seeds train only on the rounds where training is
due (``hyperx.lockstep.lockstep_cond``), so a preset that trains every 10 rounds
(``neural_classification``) is not charged for training every round. Writes
``results/bandit_neural_throughput.json``.

    python benchmarks/bandit_neural.py            # all 24 cells, T of HORIZONS, 20 + 8 seeds
    python benchmarks/bandit_neural.py --games quadratic --learners neural_ensemble_pp
    python benchmarks/bandit_neural.py --summary  # rebuild the JSON and plot from the cells
    python benchmarks/bandit_neural.py --quick    # smoke test (d = 10, T = 60, 2 + 2 seeds,
                                                  # two grid points per learner; cells under
                                                  # results/bandit_neural_quick/)
    python benchmarks/bandit_neural.py --throughput            # T = 500 at 1, 16, 64 seeds
    python benchmarks/bandit_neural.py --throughput --quick --throughput-seeds 1 2 --out /tmp/t
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import matplotlib.pyplot as plt
import numpy as np

from hyperx.bandits.base import Learner
from hyperx.bandits.baselines import uniform_random
from hyperx.bandits.neural import NEURAL_LEARNERS, PRESETS, neural_learner
from hyperx.bandits.neural_core import NeuralConfig
from hyperx.bandits.runner import BanditResult, run_bandit
from hyperx.envs.bandits import BanditEnv, make_bandit_env

RESULTS = Path(__file__).resolve().parent / "results"
GAMES = ("quadratic", "neural_regression", "neural_classification")
LEARNERS = (*NEURAL_LEARNERS, "uniform")
TUNE_SEED = 1000
THROUGHPUT_SEEDS = (1, 16, 64)
THROUGHPUT_HORIZON = 500
HORIZONS = {"quadratic": 1500, "neural_regression": 1000, "neural_classification": 1500}
"""Rounds per game: T = 1000 (the reference's default) where the preset's 10 gradient steps a
round make T = 1500 too long for 2 cores; ``--horizon`` sets one T for every game."""

_SCALES = ((5.0, 1.0), (1.0, 1.0), (0.3, 0.3), (0.1, 0.1), (0.03, 0.03))
_PRIORS = (5.0, 1.0, 0.3, 0.1, 0.03)
GRIDS: dict[str, tuple[dict[str, float], ...]] = {
    # (prior, posterior) scale: 5/1 is the reference's quadratic preset, 0.1/0.1 its default
    "neural_ensemble_pp": tuple(dict(prior_scale=p, posterior_scale=q) for p, q in _SCALES),
    "neural_hyperagent": tuple(dict(prior_scale=p, posterior_scale=q) for p, q in _SCALES),
    # the frozen prior's scale (Ensemble+: reference's per-game prior scale; epinet default 0.3)
    "neural_ensemble_plus": tuple(dict(prior_scale=p) for p in _PRIORS),
    "neural_epinet": tuple(dict(prior_scale=p) for p in _PRIORS),
    # the exploration multiplier nu (the papers' default 1)
    "neural_ucb": tuple(dict(nu=v) for v in (3.0, 1.0, 0.3, 0.1, 0.03)),
    "neural_ts": tuple(dict(nu=v) for v in (3.0, 1.0, 0.3, 0.1, 0.03)),
    "neural_epsilon_greedy": tuple(dict(epsilon=e) for e in (0.3, 0.1, 0.03, 0.01, 0.0)),
    "uniform": (),
}
"""The knob grid of every learner: one dict of factory keyword arguments per point."""


def interval(x: np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the normal 95% interval of the mean, 1.96 sd / sqrt(n)."""
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else float("nan")
    return float(x.mean()), float(half)


def record(result: BanditResult) -> dict[str, Any]:
    """The final regret's mean, 95% half-width, sd and per-seed values; the mean curve."""
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


def point_label(point: Mapping[str, float]) -> str:
    """``{"prior_scale": 0.1, "posterior_scale": 0.1}`` -> ``"prior_scale=0.1,posterior_..."``."""
    return ",".join(f"{k}={v:g}" for k, v in point.items()) or "-"


def cell_path(out: Path, game: str, name: str) -> Path:
    return out / f"{game}__{name}.json"


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` atomically (a stopped run never leaves half a cell)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The first key whose value differs between two settings dicts (JSON-normalised)."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{key}: {a.get(key)!r} on disk, {b.get(key)!r} now"
    return None


def load_cell(path: Path, settings: Mapping[str, Any], overwrite: bool) -> dict | None:
    """The cell at ``path`` if it was run with ``settings``; None if absent (or overwritten).

    Raises ``SystemExit`` naming the first differing setting when the file holds another run's
    cell and ``overwrite`` is off."""
    if not path.exists():
        return None
    cell = json.loads(path.read_text())
    diff = first_difference(cell["settings"], settings)
    if diff is None:
        return cell
    if overwrite:
        return None
    raise SystemExit(f"{path}: cell run with other settings ({diff}); pass --overwrite to "
                     "replace it, or --out another folder")


def run_cell(path: Path, settings: Mapping[str, Any], env: BanditEnv,
             make: Callable[..., Learner], grid: Sequence[Mapping[str, float]], *,
             horizon: int, seeds: int, tune_seeds: int = 0, label: str,
             overwrite: bool = False) -> dict:
    """One resumable cell: select ``make``'s knob on held-out seeds, then evaluate it.

    Each grid point ``p`` runs ``make(**p)`` on ``tune_seeds`` seeds of base seed TUNE_SEED
    (disjoint from the evaluation seeds 0..seeds-1 of base seed 0); the point with the lowest
    mean final regret is run on the evaluation seeds. An empty grid runs ``make()`` directly.
    The cell is written to ``path`` (and returned); an existing cell with ``settings`` is
    returned without running.
    """
    cell = load_cell(path, settings, overwrite)
    if cell is not None:
        print(f"{label:50s} on disk: {cell['result']['final_mean']:9.2f} +- "
              f"{cell['result']['final_ci95']:7.2f}", flush=True)
        return cell
    start = time.perf_counter()
    sweep: dict[str, float] = {}
    for point in grid:
        result = run_bandit(env, make(**point), horizon=horizon, num_seeds=tune_seeds,
                            seed=TUNE_SEED)
        sweep[point_label(point)] = float(result.final_regret.mean())
        print(f"{label:50s} tune {point_label(point):40s} {sweep[point_label(point)]:9.2f}",
              flush=True)
    selected = dict(grid[int(np.argmin(list(sweep.values())))]) if grid else {}
    tune_s = time.perf_counter() - start
    result = run_bandit(env, make(**selected), horizon=horizon, num_seeds=seeds)
    cell = {"settings": dict(settings), "selected": selected,
            "tuning": {"held_out_seeds": tune_seeds, "base_seed": TUNE_SEED,
                       "mean_final_regret": sweep, "tune_s": tune_s} if grid else None,
            "result": record(result), "cell_s": time.perf_counter() - start}
    write_json(path, cell)
    print(f"{label:50s} {point_label(selected):40s} {cell['result']['final_mean']:9.2f} +- "
          f"{cell['result']['final_ci95']:7.2f}   cell {cell['cell_s']:6.0f}s", flush=True)
    return cell


def learner_factory(name: str, game: str, config: NeuralConfig) -> Callable[..., Learner]:
    """``make(**knobs)`` for learner ``name`` with ``game``'s preset schedule."""
    if name == "uniform":
        return lambda: uniform_random()
    return lambda **knobs: neural_learner(name, game, config=config, **knobs)


def cell_settings(args: argparse.Namespace, config: NeuralConfig, game: str,
                  name: str) -> dict[str, Any]:
    return {"game": game, "learner": name, "horizon": horizon_of(args, game),
            "seeds": args.seeds,
            "tune_seeds": args.tune_seeds, "tune_base_seed": TUNE_SEED, "dim": args.dim,
            "config": config._asdict(), "grid": list(grid_of(name, args.quick))}


def horizon_of(args: argparse.Namespace, game: str) -> int:
    """The rounds T of ``game``: ``--horizon`` if given, else :data:`HORIZONS`."""
    return HORIZONS[game] if args.horizon is None else args.horizon


def grid_of(name: str, quick: bool) -> tuple[dict[str, float], ...]:
    """Learner ``name``'s knob grid; ``--quick`` keeps its first two points."""
    return GRIDS[name][:2] if quick else GRIDS[name]


def summarise(cells_dir: Path, expected: Callable[[str, str], Mapping[str, Any]],
              stem: Path, meta: dict) -> dict:
    """Rebuild ``stem``.json, ``.png`` and ``.md`` from the cells in ``cells_dir`` whose settings
    equal ``expected(game, learner)`` (others are listed under ``skipped``)."""
    results: dict[str, dict] = {}
    skipped = []
    for path in sorted(cells_dir.glob("*__*.json")):
        cell = json.loads(path.read_text())
        game, name = cell["settings"]["game"], cell["settings"]["learner"]
        if game not in GAMES or name not in LEARNERS:
            skipped.append(f"{path.name}: unknown game or learner")
            continue
        diff = first_difference(cell["settings"], expected(game, name))
        if diff is not None:
            skipped.append(f"{path.name}: {diff}")
            continue
        results.setdefault(game, {})[name] = {**cell["result"], "selected": cell["selected"],
                                              "tuning": cell["tuning"]}
    order = {g: i for i, g in enumerate(GAMES)}
    results = {g: {n: results[g][n] for n in LEARNERS if n in results[g]}
               for g in sorted(results, key=order.get)}
    summary = {"meta": meta, "results": results, "ranking": {g: ranking(r) for g, r in
                                                             results.items()},
               "skipped": skipped,
               "missing": [f"{g}__{n}" for g in meta["games"] for n in meta["learners"]
                           if n not in results.get(g, {})]}
    write_json(stem.with_suffix(".json"), summary)
    if results:
        plot(results, stem.with_suffix(".png"))
    text = table(results) + "\n\n" + ranking_text(summary["ranking"])
    horizon = meta["horizon"]
    horizon_text = (", ".join(f"{t} ({g})" for g, t in horizon.items())
                    if isinstance(horizon, dict) else str(horizon))
    stem.with_suffix(".md").write_text(
        f"Neural bandits (T = {horizon_text}, {meta['seeds']} seeds, d = {meta['dim']}; each "
        f"knob selected on {meta['tune_seeds']} held-out seeds): final cumulative expected "
        "regret, mean +- 95% interval (selected knob).\n\n" + text + "\n")
    print(text)
    print(f"{sum(map(len, results.values()))} cells -> {stem}.json/.png; missing: "
          f"{', '.join(summary['missing']) or 'none'}")
    return summary


def ranking(rows: Mapping[str, dict]) -> dict[str, Any]:
    """Which learner wins a game, and which cannot be told apart from it.

    The best learner is the one with the lowest mean final regret; every other learner gets
    its difference from the best, paired over the evaluation seeds (seed s is the same problem
    for every learner), as mean and 95% half-width. A learner whose interval contains 0 is
    ``tied_with_best``; the others are ``behind_best``.
    """
    best = min(rows, key=lambda n: rows[n]["final_mean"])
    ref = np.asarray(rows[best]["final_per_seed"])
    diffs = {}
    for name, row in rows.items():
        values = np.asarray(row["final_per_seed"])
        if name == best or values.shape != ref.shape:
            continue
        mean, half = interval(values - ref)
        diffs[name] = {"mean": mean, "ci95": half}
    tied = [n for n, d in diffs.items() if not d["mean"] - d["ci95"] > 0]
    return {"best": best, "paired_difference_from_best": diffs, "tied_with_best": tied,
            "behind_best": [n for n in diffs if n not in tied]}


def ranking_text(rankings: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per game: the best learner and the others' paired differences from it."""
    lines = []
    for game, rank in rankings.items():
        diffs = rank["paired_difference_from_best"]
        others = ", ".join(f"{n} +{d['mean']:.1f} +- {d['ci95']:.1f}"
                           for n, d in sorted(diffs.items(), key=lambda kv: kv[1]["mean"]))
        lines.append(f"- {game}: best {rank['best']}; paired difference from it: {others}")
    return "\n".join(lines)


def table(results: Mapping[str, Mapping[str, dict]]) -> str:
    """Markdown table: learner x game, mean final regret +- 95% half-width (selected knob)."""
    games = list(results)
    lines = ["| learner | " + " | ".join(games) + " |", "|---" * (len(games) + 1) + "|"]
    for name in (n for n in LEARNERS if any(n in rows for rows in results.values())):
        cells = []
        for game in games:
            row = results[game].get(name)
            cells.append("-" if row is None else f"{row['final_mean']:.1f} +- "
                         f"{row['final_ci95']:.1f} ({point_label(row['selected'])})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def plot(results: Mapping[str, Mapping[str, dict]], path: Path) -> None:
    plt.switch_backend("Agg")
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (game, rows) in zip(axes[0], results.items(), strict=True):
        for name, row in rows.items():
            t, mean = np.asarray(row["t"]), np.asarray(row["curve_mean"])
            ax.plot(t, mean, label=f"{name} ({point_label(row.get('selected', {}))})")
            if row["curve_ci95"] is not None:
                half = np.asarray(row["curve_ci95"])
                ax.fill_between(t, mean - half, mean + half, alpha=0.2)
        ax.set(title=game, xlabel="round t", ylabel="cumulative expected regret")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_positive_args(parser: argparse.ArgumentParser, args: argparse.Namespace,
                        names: Sequence[str]) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer, got {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=None,
                        help=f"rounds T of every game (default: {HORIZONS}; "
                             f"{THROUGHPUT_HORIZON} with --throughput)")
    parser.add_argument("--seeds", type=int, default=20, help="evaluation seeds")
    parser.add_argument("--tune-seeds", type=int, default=8,
                        help="held-out seeds (base seed 1000) on which each knob is selected")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--games", nargs="+", default=list(GAMES), choices=GAMES)
    parser.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=LEARNERS)
    parser.add_argument("--learning-rate", type=float, default=NeuralConfig().learning_rate,
                        help="Adam step size of every neural learner (reference: 1e-4)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: T = 60, 2 + 2 seeds, d = 10, a smaller network")
    parser.add_argument("--overwrite", action="store_true",
                        help="rerun cells on disk that were run with other settings")
    parser.add_argument("--summary", action="store_true",
                        help="only rebuild the summary JSON and plot from the cells on disk")
    parser.add_argument("--throughput", action="store_true",
                        help="measure seed-rounds per second instead of regret")
    parser.add_argument("--throughput-seeds", type=int, nargs="+",
                        default=list(THROUGHPUT_SEEDS),
                        help="seed counts of --throughput, each one vmapped program")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    check_positive_args(parser, args, ("horizon", "seeds", "dim", "tune_seeds"))
    if min(args.throughput_seeds) < 1:
        parser.error(f"--throughput-seeds: expected positive integers, got "
                     f"{args.throughput_seeds}")
    config = NeuralConfig(learning_rate=args.learning_rate)
    if args.horizon is None and args.throughput:
        args.horizon = THROUGHPUT_HORIZON
    if args.quick:
        args.horizon, args.seeds, args.dim, args.tune_seeds = 60, 2, 10, 2
        config = config._replace(hidden=(16, 16), batch_size=16, learning_starts=16)
    meta = {"horizon": args.horizon if args.horizon is not None else dict(HORIZONS),
            "dim": args.dim, "num_arms": 50, "num_candidates": 1000,
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
    stem = "bandit_neural_quick" if args.quick else "bandit_neural"
    cells_dir = args.out / stem
    cells_dir.mkdir(exist_ok=True)
    if not args.summary:
        for game in args.games:
            env = make_bandit_env(game, dim=args.dim)
            for name in args.learners:
                run_cell(cell_path(cells_dir, game, name), cell_settings(args, config, game, name),
                         env, learner_factory(name, game, config), grid_of(name, args.quick),
                         horizon=horizon_of(args, game), seeds=args.seeds,
                         tune_seeds=args.tune_seeds,
                         label=f"{game} {name}", overwrite=args.overwrite)
    meta.update(seeds=args.seeds, tune_seeds=args.tune_seeds, tune_base_seed=TUNE_SEED,
                games=list(GAMES), learners=list(LEARNERS),
                grids={k: list(v) for k, v in GRIDS.items()},
                session_s=time.perf_counter() - start)
    summarise(cells_dir, lambda g, n: cell_settings(args, config, g, n), args.out / stem, meta)


if __name__ == "__main__":
    main()
