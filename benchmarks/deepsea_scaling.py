"""DeepSea scaling: episodes to learn vs size N for the value-based agents.

Cells: N in {10, 20, 30} for hyperagent, hyperfqi, hyperdqn, ensemble_plus, epinet_dqn and dqn
with 5 seeds, and N in {40, 50} for the hyper agents with 3 seeds. Every agent gets the same
env-step budget at a given N: HyperAgent's published budgets (20 -> 50k, 30 -> 100k,
40 -> 120k, 50 -> 200k; Li et al., ICML 2024) and our choice 10 -> 20k. bsuite mapping seed 42
for every seed (Osband et al., ICLR 2020). Each (agent, N) cell writes its own JSON under
benchmarks/results/deepsea_scaling/, so a stopped run resumes at the next missing cell; the
summary (summary.json, summary.md, scaling.png) is rebuilt from all cell files present.

"Learned" is bsuite's criterion at its exact per-episode crossing (first episode with
#bad / #episodes < 0.9), and, stricter, the first episode whose last-100 mean return reaches
0.9 x 0.99. The plot and table give the median over seeds that learned, with the count; a
linear fit of the median bsuite episode against N is reported for the hyper agents, over the
sizes where at least half the seeds learned.

Full run: python benchmarks/deepsea_scaling.py   (about 1.5 h alone on 2 CPU cores)
A stopped CLI run as a cell: python benchmarks/deepsea_scaling.py --from-run runs/ds50_hyperagent
Tiny check: python benchmarks/deepsea_scaling.py --sizes 4 --agents dqn --seeds 2 \
            --budget 400 --out /tmp/scaling
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import time

import numpy as np

from hyperx.agents import AGENT_NAMES, get_config
from hyperx.agents.deepsea import DEEPSEA_STEP_BUDGETS, train_deepsea
from hyperx.envs.deepsea import bsuite_learned_episode, running_mean_learned_episode

BUDGETS = {n: DEEPSEA_STEP_BUDGETS[n] for n in (10, 20, 30, 40, 50)}  # the package's table
HYPER = ("hyperagent", "hyperfqi", "hyperdqn")
BASELINES = ("ensemble_plus", "epinet_dqn", "dqn")
OUT = os.path.join(os.path.dirname(__file__), "results", "deepsea_scaling")


def default_cells(seeds: int | None) -> list[tuple[str, int, int]]:
    """(agent, N, seeds) of the full study."""
    cells = [(a, n, seeds or 5) for n in (10, 20, 30) for a in HYPER + BASELINES]
    return cells + [(a, n, seeds or 3) for n in (40, 50) for a in HYPER]


def parse_overrides(items: list[str]) -> dict:
    """``["adam_eps=1.5e-4", "init_scheme=default"]`` -> config overrides (values parsed as
    Python literals when they are, else kept as strings)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override: expected KEY=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def run_cell(agent: str, size: int, seeds: int, budget: int, out: str,
             overrides: dict | None = None) -> dict:
    """Train one cell (or load it when its file exists) and return its record."""
    path = os.path.join(out, f"{agent}_N{size}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    start = time.perf_counter()
    overrides = overrides or {}
    result = train_deepsea(get_config(agent, **overrides), size, max(budget // size, 1),
                           num_seeds=seeds, progress=True)
    record = {
        "agent": agent, "size": size, "seeds": seeds, "overrides": overrides,
        "env_steps_per_seed": result.steps_done,
        "episodes": int(result.returns.shape[1]),
        "learned_episode_bsuite": result.learned_bsuite.tolist(),
        "learned_episode_running_mean": result.learned_running_mean.tolist(),
        "compile_time_s": result.compile_time_s, "wall_time_s": result.wall_time_s,
        "total_time_s": time.perf_counter() - start, "env_steps_per_s": result.env_steps_per_s,
    }
    os.makedirs(out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    return record


def cell_from_run(run_dir: str, out: str) -> dict:
    """Write the cell of a ``hyperx deepsea`` run directory (complete or stopped), from its
    per-episode ``returns.csv``: the learned episodes are recomputed from the logged returns
    and bad flags. bsuite's crossing is the first episode whose prefix fraction of bad
    episodes falls below 0.9, so a seed that crossed in a stopped run crossed there in the
    full run too; a seed that did not is recorded -1 with ``episodes_done`` saying how far the
    run went."""
    import csv

    with open(os.path.join(run_dir, "run.json")) as f:
        run = json.load(f)
    settings = run["settings"]
    with open(os.path.join(run_dir, "returns.csv")) as f:
        rows = list(csv.DictReader(f))
    seeds = int(settings["seeds"])
    done = min(sum(int(r["seed"]) == s for r in rows) for s in range(seeds))
    returns = np.zeros((seeds, done), np.float32)
    bad = np.zeros((seeds, done), bool)
    for r in rows:
        s, e = int(r["seed"]), int(r["episode"]) - 1
        if e < done:
            returns[s, e], bad[s, e] = float(r["return"]), r["bad"] == "1"
    size = int(settings["size"])
    record = {
        "agent": settings["agent"], "size": size, "seeds": seeds, "overrides": {},
        "env_steps_per_seed": done * size, "episodes": int(settings["episodes"]),
        "episodes_done": done,
        "status": "complete" if run.get("complete") else
                  f"stopped after {done} of {settings['episodes']} episodes (every seed that "
                  "crossed bsuite's criterion crossed at the episode given; -1: not by then)",
        "learned_episode_bsuite": [int(bsuite_learned_episode(b)) for b in bad],
        "learned_episode_running_mean": [int(running_mean_learned_episode(r))
                                         for r in returns],
        "source": f"hyperx deepsea run directory {run_dir} (returns.csv, run.json)",
        "env_steps_per_s": None,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{record['agent']}_N{size}.json"), "w") as f:
        json.dump(record, f, indent=2)
    return record


def load_cells(out: str) -> list[dict]:
    """Every cell record under ``out`` (files ``AGENT_N<size>.json``), from any run."""
    records = []
    for name in sorted(os.listdir(out)):
        if re.fullmatch(r"[a-z_]+_N\d+\.json", name):
            with open(os.path.join(out, name)) as f:
                records.append(json.load(f))
    return records


def _median_learned(episodes: list[int]) -> float | None:
    learned = [e for e in episodes if e > 0]
    return float(np.median(learned)) if learned else None


def summarise(records: list[dict], out: str) -> dict:
    """Table (JSON + markdown), plot, and linear fits for the hyper agents."""
    rows = []
    for r in sorted(records, key=lambda r: (r["agent"], r["size"])):
        b, s = r["learned_episode_bsuite"], r["learned_episode_running_mean"]
        rows.append({"agent": r["agent"], "size": r["size"], "seeds": r["seeds"],
                     "budget_episodes": r["episodes"],
                     "learned_bsuite": sum(e > 0 for e in b),
                     "median_episode_bsuite": _median_learned(b),
                     "learned_running_mean": sum(e > 0 for e in s),
                     "median_episode_running_mean": _median_learned(s),
                     "env_steps_per_s": r["env_steps_per_s"],
                     "episodes_done": r.get("episodes_done", r["episodes"])})
    fits = {}
    for agent in HYPER:  # cells where at least half the seeds learned
        pts = [(r["size"], r["median_episode_bsuite"]) for r in rows
               if r["agent"] == agent and 2 * r["learned_bsuite"] >= r["seeds"]]
        if len(pts) >= 2:
            slope, intercept = np.polyfit(*np.array(pts, np.float64).T, 1)
            fits[agent] = {"slope_episodes_per_N": float(slope), "intercept": float(intercept),
                           "sizes": [p[0] for p in pts]}
    summary = {"budgets_env_steps": BUDGETS, "criterion": "bsuite exact per-episode crossing; "
               "running mean = last-100 mean return >= 0.9 x 0.99; medians over seeds that "
               "learned", "rows": rows, "linear_fit_bsuite": fits}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    lines = ["| agent | N | learned (bsuite) | median episode (bsuite) | learned (mean-100) "
             "| median episode (mean-100) | env steps/s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['agent']} | {r['size']} | {r['learned_bsuite']}/{r['seeds']} | "
                     f"{r['median_episode_bsuite']} | {r['learned_running_mean']}/{r['seeds']} | "
                     f"{r['median_episode_running_mean']} | {_speed(r['env_steps_per_s'])} |")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    _plot(rows, fits, os.path.join(out, "scaling.png"))
    return summary


def _speed(steps_per_s: float | None) -> str:
    return "-" if steps_per_s is None else f"{steps_per_s:.0f}"


def _plot(rows: list[dict], fits: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for agent in sorted({r["agent"] for r in rows}):
        pts = [(r["size"], r["median_episode_bsuite"]) for r in rows
               if r["agent"] == agent and r["median_episode_bsuite"] is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", label=agent)
        if agent in fits:
            n = np.array([min(fits[agent]["sizes"]), max(fits[agent]["sizes"])])
            ax.plot(n, fits[agent]["slope_episodes_per_N"] * n + fits[agent]["intercept"],
                    ":", color="gray", lw=1)
    ax.set(xlabel="DeepSea size N", ylabel="episodes to learn (bsuite, median)",
           title="DeepSea scaling")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", choices=AGENT_NAMES, default=None)
    parser.add_argument("--sizes", nargs="+", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 5/3)")
    parser.add_argument("--budget", type=int, default=None,
                        help="env steps per seed for every cell (default: BUDGETS by N)")
    parser.add_argument("--out", default=OUT)
    parser.add_argument("--from-run", default=None, metavar="DIR",
                        help="write the cell of a `hyperx deepsea` run directory (complete or "
                             "stopped) from its returns.csv, then rebuild the summary")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config fields to replace (ablations), e.g. init_scheme=default")
    args = parser.parse_args()
    overrides = parse_overrides(args.override)
    if args.from_run:
        print(json.dumps(cell_from_run(args.from_run, args.out), indent=2))
        summarise(load_cells(args.out), args.out)
        return
    cells = default_cells(args.seeds)
    if args.agents or args.sizes:
        agents = args.agents or list(HYPER + BASELINES)
        sizes = args.sizes or sorted(BUDGETS)
        cells = [(a, n, args.seeds or (5 if n <= 30 else 3)) for n in sizes for a in agents]
    for agent, size, seeds in cells:
        budget = args.budget or BUDGETS.get(size, 1000 * size)
        print(f"{agent} N={size} seeds={seeds} budget={budget} steps", flush=True)
        run_cell(agent, size, seeds, budget, args.out, overrides)
    summary = summarise(load_cells(args.out), args.out)
    print(json.dumps(summary["linear_fit_bsuite"], indent=2))


if __name__ == "__main__":
    main()
