"""The Atari-26 protocol: one agent on the 26 games, human-normalised IQM / median / mean.

For each game, all seeds train in one program (:func:`hyperx.agents.atari.train_atari`: one pool
of seeds x envs games); each (game, seed) result is written to its own file under
``--out-dir/<agent>/<game>_s<seed>.json`` as soon as the game's run ends, and a rerun skips the
cells already on disk (resumable per cell). Aggregation: human-normalised scores
(``hyperx/data/atari_human_random.json``), IQM / median / mean over runs x games with
stratified-bootstrap 95% intervals (rliable), a markdown table and a plot, with the HyperAgent
paper's figures alongside (IQM 1.0 at 1.5M interactions; Ensemble+ 0.22).

Scores: ``final`` is the final policy's greedy score (the rliable protocol, the default of the
table); ``best`` is the best evaluation during training and, with ``--best-eval-episodes 200``,
that checkpoint re-evaluated on 200 games (HyperAgent's protocol; optimistic). The table says
which one it shows.

On one GPU: ``python benchmarks/atari26.py --agent hyperagent --steps 1500000 --seeds 5``
(26 games x 1.5M steps; see docs/atari.md for time and memory per run). Tiny check on CPU:
``python benchmarks/atari26.py --games Pong Breakout --steps 256 --seeds 2 --eval-episodes 1
--eval-max-steps 100 --out-dir /tmp/a26``.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from hyperx.agents import get_config
from hyperx.agents.atari import train_atari
from hyperx.agents.atari_scores import aggregate, human_normalised
from hyperx.envs.atari import ATARI_26

OUT_DIR = os.path.join(os.path.dirname(__file__), "results", "atari26")
PAPER = {"HyperAgent (paper, 1.5M interactions, best-checkpoint protocol)": {"iqm": 1.0},
         "Ensemble+ (HyperAgent paper, 1.5M)": {"iqm": 0.22}}


def cell_path(out_dir: str, agent: str, game: str, seed: int) -> str:
    return os.path.join(out_dir, agent, f"{game}_s{seed}.json")


def run_game(args: argparse.Namespace, game: str) -> None:
    """Train every seed of ``game`` in one program unless all its cells are on disk."""
    paths = [cell_path(args.out_dir, args.agent, game, s) for s in range(args.seeds)]
    if all(os.path.exists(p) for p in paths):
        return
    result = train_atari(get_config(args.agent, env="atari"), game, steps=args.steps,
                         seeds=args.seeds, envs_per_seed=args.envs_per_seed, seed=args.seed,
                         eval_episodes=args.eval_episodes,
                         best_eval_episodes=args.best_eval_episodes,
                         eval_max_steps=args.eval_max_steps)
    last = max(e["env_step"] for e in result.evaluations)
    for s, path in enumerate(paths):
        final = [e["score"] for e in result.evaluations if e["seed"] == s
                 and e["env_step"] == last]
        best = result.best[s]
        cell = {"game": game, "agent": args.agent, "seed": s, "steps": result.steps_done,
                "final": final[0], "best": best.get("rerun_score", best["score"]),
                "best_protocol": best.get("rerun_protocol", best["protocol"]),
                "evaluations": [e for e in result.evaluations if e["seed"] == s],
                "env_steps_per_s": result.env_steps_per_s}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(cell, f, indent=1)
        os.replace(path + ".tmp", path)


def summarise(out_dir: str, agent: str, games: list[str], seeds: int,
              reps: int = 50_000) -> dict:
    """Aggregates of the cells on disk (games with all seeds done)."""
    cells = {}
    for game in games:
        paths = [cell_path(out_dir, agent, game, s) for s in range(seeds)]
        if all(os.path.exists(p) for p in paths):
            cells[game] = [json.load(open(p)) for p in paths]
    if not cells:
        return {"games_done": []}
    done = sorted(cells)
    table = {}
    for protocol in ("final", "best"):
        matrix = np.array([[human_normalised(cells[g][s][protocol], g) for g in done]
                           for s in range(seeds)])
        table[protocol] = {"normalised": matrix.tolist(),
                           "aggregate": aggregate({agent: matrix}, reps=reps)[agent]}
    return {"agent": agent, "games_done": done, "seeds": seeds, "scores": table,
            "paper": PAPER}


def write_report(summary: dict, out_dir: str) -> None:
    agent = summary["agent"]
    lines = [f"# {agent} on the Atari-26 games ({len(summary['games_done'])} done)", "",
             "| protocol | IQM [95% CI] | median | mean |", "|---|---|---|---|"]
    for protocol, label in (("final", "final policy (rliable)"),
                            ("best", "best checkpoint (optimistic)")):
        a = summary["scores"][protocol]["aggregate"]
        cells = [f"{a[m]['value']:.3f} [{a[m]['low']:.3f}, {a[m]['high']:.3f}]"
                 for m in ("iqm", "median", "mean")]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    for name, figures in PAPER.items():
        lines.append(f"| {name} | {figures['iqm']:.2f} | - | - |")
    with open(os.path.join(out_dir, f"{agent}_table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    names, values, errs = [], [], []
    for protocol in ("final", "best"):
        a = summary["scores"][protocol]["aggregate"]["iqm"]
        names.append(f"{agent} ({protocol})")
        values.append(a["value"])
        errs.append([a["value"] - a["low"], a["high"] - a["value"]])
    for name, figures in PAPER.items():
        names.append(name.split(" (")[0] + " (paper)")
        values.append(figures["iqm"])
        errs.append([0.0, 0.0])
    ax.barh(names, values, xerr=np.array(errs).T, color="C0")
    ax.set_xlabel("human-normalised IQM (95% CI)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"{agent}_iqm.png"), dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="hyperagent")
    parser.add_argument("--games", nargs="+", default=list(ATARI_26))
    parser.add_argument("--steps", type=int, default=1_500_000, help="env steps per seed")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs-per-seed", type=int, default=1)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--best-eval-episodes", type=int, default=0)
    parser.add_argument("--eval-max-steps", type=int, default=27_000)
    parser.add_argument("--reps", type=int, default=50_000, help="bootstrap resamples")
    parser.add_argument("--out-dir", default=OUT_DIR)
    args = parser.parse_args()
    for game in args.games:
        run_game(args, game)
        print(f"{game}: done", flush=True)
    summary = summarise(args.out_dir, args.agent, args.games, args.seeds, args.reps)
    with open(os.path.join(args.out_dir, f"{args.agent}_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    write_report(summary, args.out_dir)
    print(open(os.path.join(args.out_dir, f"{args.agent}_table.md")).read())


if __name__ == "__main__":
    main()
