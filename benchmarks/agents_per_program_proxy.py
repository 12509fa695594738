"""Agents per program on the CPU: does the compiled Atari loop's per-step overhead grow with the
number of agents it holds?

On a GPU the way out of the latency-bound regime is many agents in one program: one batched
update for all of them while the host cores step the emulators. On this CPU the real agents are
compute bound (the Nature CNN's update costs the same per agent whatever the batch), so their
summed steps/s is flat in the number of agents and says nothing about the design. This proxy
isolates what the GPU would not hide: the network is shrunk to an MLP torso of ``--width``
units on the flattened frames (a few kFLOP per sample), and everything else is the real loop:
envpool's emulators (the XLA step inside the scan, threads from the machine's cores), acting,
the frame replay, one update per env step (``update_every = 1``, batch 32), target syncs.

For each agent kind and each number of agents ``n`` in one program (``seeds = n``, one game
each), two runs of ``--steps`` env steps per agent, timed after compiling:

* ``learn``: the agents learn from the start (``learning_starts = 64``, inside the run);
* ``idle``: they never learn (``learning_starts`` past the run): emulation, acting, storing.

Recorded per row: the summed agent steps/s and the wall time of one program iteration
``t(n) = n / rate`` (one env step of every agent). A straight line ``t(n) = a + b n`` is fitted
per kind and mode: ``a`` is the per-step overhead that does not depend on the agents (dispatch,
scan bookkeeping, the env call's fixed cost), ``b`` the cost each agent adds. The design holds
when ``a`` is small against ``b`` and the cost per agent step ``t(n) / n`` does not grow with
``n`` (summed steps/s never falls as agents are added); ``overhead_flat`` records that check
(``t(n) / n`` at the largest ``n`` within ``--tolerance`` of its smallest value or below).

Beside the timings, ``update_cost``: XLA's cost analysis of the update vmapped over ``n``
agents (floating-point operations and bytes accessed per agent; from shapes, so independent of
the machine's load), which tells whether the work per agent grows with ``n`` or only its time.
``--cost-only`` adds those rows to an existing result file without timing anything.

Several games in one program (``--several-games G1 G2 ...``, added to an existing result file
as ``several_games``): ``--agents-per-game`` agents of each game alone in its own program, and
the first 2, 3, ... games together in one program
(:class:`hyperx.envs.atari.AtariGames`, every game's emulators started before any is waited
for), and the first game alone with as many agents as that program. In both modes the
several-game program's iteration time is set against (a) the SUM of the one-game programs'
(the time to step the same agents one program after another: the same emulation) and (b) the
one-game program of as many agents (the same batched update and acting: on this CPU the update's
time per agent grows with the agents in a program, see above, which (a) does not separate from
the layout). Ratios near 1 mean holding the games in one program adds no per-step overhead of
its own. The one-game programs have
each game's own action set, the several-game ones the ALE's 18 actions (a few more outputs of
the proxy's last layer and of the argmax).

Writes benchmarks/results/agents_per_program_proxy.json and .png. Needs the machine to itself
(a throughput benchmark). Full run: about 15 minutes on 2 cores,
``python benchmarks/agents_per_program_proxy.py``; tiny check: ``python
benchmarks/agents_per_program_proxy.py --agents 1 2 --steps 96 --kinds dqn --out /tmp/p.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np

from hyperx.agents import get_config
from hyperx.agents.atari import train_atari
from hyperx.agents.core import make_agent
from hyperx.envs.atari import OBS_SHAPE, action_meanings
from hyperx.replay_frames import make_frame_replay

OUT = os.path.join(os.path.dirname(__file__), "results", "agents_per_program_proxy.json")


def proxy_config(kind: str, width: int, learning_starts: int, steps: int):
    """``kind``'s Atari config with the network shrunk to an MLP of ``width`` units and one
    update per env step; the replay holds the whole run."""
    return get_config(kind, env="atari", torso="mlp", torso_widths=(width,), update_every=1,
                      batch_size=32, buffer_size=max(steps, 64), learning_starts=learning_starts,
                      random_start=0)


def measure(kind: str, game: str | list[str], agents: int, steps: int, width: int,
            learn: bool) -> dict:
    """One timed run of ``agents`` agents in one program (rate after compiling); ``game`` a
    list: those games in the one program, the agents split equally between them."""
    config = proxy_config(kind, width, 64 if learn else 10 * steps, steps)
    start = time.perf_counter()
    result = train_atari(config, game, steps=steps, seeds=agents, envs_per_seed=1,
                         eval_episodes=0)
    rate = result.env_steps_per_s
    return {"kind": kind, "mode": "learn" if learn else "idle", "agents": agents,
            "games": sorted(set(result.games), key=result.games.index),
            "agent_steps_per_s": rate, "iteration_ms": 1e3 * agents / rate,
            "agent_step_us": 1e6 / rate, "compile_s": result.compile_time_s,
            "wall_s": time.perf_counter() - start}


def update_cost(kind: str, game: str, agents: int, steps: int, width: int) -> dict:
    """XLA's cost analysis of one update of ``agents`` vmapped agents, per agent."""
    agent = make_agent(proxy_config(kind, width, 64, steps), len(action_meanings(game)),
                       jnp.zeros(OBS_SHAPE, jnp.uint8), num_envs=1, replay=make_frame_replay,
                       step_budget=steps)
    keys = jax.ShapeDtypeStruct((agents, 2), jnp.uint32)
    state = jax.eval_shape(jax.vmap(agent.init), keys)
    cost = jax.jit(jax.vmap(agent.update)).lower(state, keys).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"kind": kind, "agents": agents, "mflops_per_agent": cost["flops"] / agents / 1e6,
            "mbytes_accessed_per_agent": cost["bytes accessed"] / agents / 1e6}


def fit_line(agents: list[int], iteration_ms: list[float]) -> dict:
    """Least squares ``t(n) = a + b n`` (ms) and the largest relative residual."""
    n, t = np.asarray(agents, float), np.asarray(iteration_ms, float)
    b, a = np.polyfit(n, t, 1)
    residual = np.max(np.abs(t - (a + b * n)) / t)
    return {"overhead_ms": float(a), "per_agent_ms": float(b),
            "max_relative_residual": float(residual)}


def summarise(rows: list[dict], tolerance: float) -> dict:
    """Per kind and mode: the fit, the cost per agent step at each n, and the flatness check."""
    summary: dict = {}
    for kind in sorted({r["kind"] for r in rows}):
        for mode in ("learn", "idle"):
            sel = sorted((r for r in rows if r["kind"] == kind and r["mode"] == mode),
                         key=lambda r: r["agents"])
            if len(sel) < 2:
                continue
            per_step = [r["agent_step_us"] for r in sel]
            summary[f"{kind}/{mode}"] = {
                **fit_line([r["agents"] for r in sel], [r["iteration_ms"] for r in sel]),
                "agents": [r["agents"] for r in sel],
                "agent_steps_per_s": [r["agent_steps_per_s"] for r in sel],
                "agent_step_us": per_step,
                "overhead_flat": bool(per_step[-1] <= (1 + tolerance) * min(per_step)),
                "speedup_largest_vs_one": sel[-1]["agent_steps_per_s"]
                / sel[0]["agent_steps_per_s"]}
    return summary


def several_games(kind: str, games: list[str], per_game: int, steps: int, width: int) -> dict:
    """The ``--several-games`` rows and, per mode and number of games K >= 2, the one
    program's iteration time over the sum of the K one-game programs' (see the docstring)."""
    rows = []
    for learn in (True, False):
        for k in range(1, len(games) + 1):
            layouts = [[g] for g in games] if k == 1 else [games[:k], [games[0]]]
            for layout in layouts:
                row = measure(kind, layout, per_game * k, steps, width, learn)
                rows.append(row)
                print(f"{kind} {row['mode']}: {', '.join(row['games'])}, {row['agents']} agents"
                      f" {row['iteration_ms']:.2f} ms per iteration", flush=True)
    summary = {}
    for mode in ("learn", "idle"):
        alone = {(r["games"][0], r["agents"]): r["iteration_ms"] for r in rows
                 if r["mode"] == mode and len(r["games"]) == 1}
        for r in rows:
            if r["mode"] == mode and len(r["games"]) > 1:
                separate = sum(alone[g, per_game] for g in r["games"])
                same = alone[games[0], r["agents"]]
                summary[f"{mode}/{len(r['games'])}_games"] = {
                    "games": r["games"], "agents": r["agents"],
                    "one_program_iteration_ms": r["iteration_ms"],
                    "sum_of_one_game_programs_ms": separate,
                    "ratio_to_separate_programs": r["iteration_ms"] / separate,
                    f"{games[0]}_alone_same_agents_ms": same,
                    "ratio_to_one_game_same_agents": r["iteration_ms"] / same}
    return {"kind": kind, "agents_per_game": per_game, "steps_per_agent": steps,
            "summary": summary, "rows": rows}


def plot(summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, s in summary.items():
        left.plot(s["agents"], s["agent_steps_per_s"], "o-", label=name)
        n = np.asarray(s["agents"], float)
        iteration = n * np.asarray(s["agent_step_us"]) / 1e3
        line = right.plot(n, iteration, "o", label=name)[0]
        right.plot(n, s["overhead_ms"] + s["per_agent_ms"] * n, "-", color=line.get_color(),
                   alpha=0.6)
    left.set(xscale="log", yscale="log", xlabel="agents in one program",
             ylabel="summed agent steps/s", title="throughput (proxy network)")
    right.set(xscale="log", yscale="log", xlabel="agents in one program",
              ylabel="ms per program iteration", title="t(n) and its fit a + b n")
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--kinds", nargs="+", default=["hyperagent", "dqn"])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--steps", type=int, default=1024, help="env steps per agent")
    parser.add_argument("--width", type=int, default=4, help="units of the proxy torso")
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--cost-only", action="store_true",
                        help="add the update_cost rows to the result file at --out, no timing")
    parser.add_argument("--several-games", nargs="+", metavar="GAME",
                        help="add the several-games rows (the first kind) to the file at --out")
    parser.add_argument("--agents-per-game", type=int, default=8)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    if args.several_games:
        if len(set(args.several_games)) < 2:
            parser.error(f"--several-games: expected at least two different games, got "
                         f"{args.several_games}")
        with open(args.out) as f:
            result = json.load(f)
        result["several_games"] = {
            **several_games(args.kinds[0], args.several_games, args.agents_per_game,
                            args.steps, args.width),
            "load_average": os.getloadavg(), "commit": _commit(),
            "command": f"python benchmarks/agents_per_program_proxy.py --several-games "
                       f"{' '.join(args.several_games)} --agents-per-game "
                       f"{args.agents_per_game} --kinds {args.kinds[0]} --steps {args.steps} "
                       f"--width {args.width}"}
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result["several_games"]["summary"], indent=1))
        return
    costs = [update_cost(kind, args.game, agents, args.steps, args.width) for kind in args.kinds
             for agents in args.agents]
    if args.cost_only:
        with open(args.out) as f:
            result = json.load(f)
        result["update_cost"] = costs
        result["update_cost_commit"] = _commit()
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(costs, indent=1))
        return
    rows = []
    for kind in args.kinds:
        for agents in args.agents:
            for learn in (True, False):
                row = measure(kind, args.game, agents, args.steps, args.width, learn)
                rows.append(row)
                print(f"{kind} {row['mode']}: {agents} agents {row['agent_steps_per_s']:.0f} "
                      f"agent steps/s, {row['iteration_ms']:.2f} ms per iteration", flush=True)
    summary = summarise(rows, args.tolerance)
    result = {
        "game": args.game, "steps_per_agent": args.steps, "width": args.width,
        "update_every": 1, "batch_size": 32, "device": str(jax.devices()[0]),
        "cpu_cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
        "versions": {"jax": jax.__version__, "envpool": __import__("envpool").__version__},
        "summary": summary, "update_cost": costs, "rows": rows,
        "command": "python benchmarks/agents_per_program_proxy.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items() if k not in ("out", "cost_only"))}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    plot(summary, os.path.splitext(args.out)[0] + ".png")
    print(json.dumps(summary, indent=1))


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()


if __name__ == "__main__":
    main()
