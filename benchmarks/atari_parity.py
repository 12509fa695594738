"""Parity with the authors' own HyperAgent Atari curves at the budget this CPU affords.

The reference (szrlee/HyperAgent, experiments/atari/run_HyperAgent.sh running
hyperagent/scripts/hyperagent/run_atari.py; atari_results/HyperAgent_8hard.csv, seeds
2025-2029) evaluates after every 20,000 agent steps, and at step 0, on 10 games: no life loss,
raw scores, the 27,000-step cap, a fresh index per game, greedy on it. This script runs our
``hyperagent`` Atari config (which matches that script; docs/atari.md, "Parity with the
reference code") on the same schedule, one seed per program (``--seeds-per-program 1``) with
an orbax checkpoint every ``--chunk-steps``, so a stopped run resumes where it stopped:

    nice python benchmarks/atari_parity.py --games Alien --agents hyperagent --seeds 3

Beside it: a uniformly random policy under the same evaluation protocol (``--random-episodes``
games), on Freeway an always-UP policy (it scores about 20-23, so Freeway alone cannot show
learning), and the reference's 5-seed mean [min, max]. ``dqn_100k`` is DQN with the
data-efficient settings of Dopamine's Atari-100k DrQ(eps) config (no augmentation).

Outputs (``--out-dir``, default benchmarks/results/atari_parity/): per game, agent and seed a
``progress.json`` written after every chunk (the evaluations so far) and the checkpoints;
``benchmarks/results/atari_parity.json`` with ``games.<Game>.<agent>.evals = {"<agent step>":
[one mean evaluation return per seed]}``, the reference's numbers and the baselines; and the
plot ``atari_parity.png``. ``--summarise-only`` rebuilds those two from the progress files (a
partial run's results) without training. A GPU (``benchmarks/gpu_atari.sh parity``) runs all
seeds of a game in one program (``--seeds-per-program 8``).

Tiny check (seconds of training): ``python benchmarks/atari_parity.py --steps 64 --eval-every
32 --chunk-steps 32 --seeds 1 --eval-episodes 1 --eval-max-steps 50 --random-episodes 2
--learning-starts 16 --out-dir /tmp/ap --summary /tmp/ap.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
OUT_DIR = os.path.join(RESULTS, "atari_parity")
SUMMARY = os.path.join(RESULTS, "atari_parity.json")

REFERENCE = {
    "source": "szrlee/HyperAgent atari_results/HyperAgent_8hard.csv (seeds 2025-2029); "
              "10-game evaluation means, mean over the 5 seeds with [min, max]",
    "Alien": {"0": [72.0, 18, 166], "20000": [460.8, 288, 708], "40000": [683.8, 531, 873],
              "60000": [634.6, 558, 688], "80000": [667.8, 590, 762],
              "100000": [720.2, 612, 937]},
    "Freeway": {"0": [8.4, 0, 19], "20000": [21.6, 21, 22], "40000": [22.5, 21, 24],
                "60000": [23.2, 21, 24], "80000": [24.9, 24, 26], "100000": [24.6, 23, 26]},
}
"""The authors' own curve (mean, min, max over their 5 seeds) by agent step."""

PUBLISHED_RANDOM = {"Alien": 227.8, "Freeway": 0.0}
FIXED_POLICIES = {"Freeway": ("always_up", "UP")}
"""Trivial policies that score well on a game (measured beside the agents)."""


def t_interval(x: list[float]) -> dict:
    """Mean with a 95% Student-t interval over seeds (``None`` with fewer than 2 values)."""
    from scipy import stats

    x = np.asarray(x, np.float64)
    out = {"mean": float(x.mean()) if x.size else None, "n": int(x.size),
           "min": float(x.min()) if x.size else None, "max": float(x.max()) if x.size else None}
    if x.size >= 2:
        half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
        out["ci95"] = [float(x.mean() - half), float(x.mean() + half)]
    else:
        out["ci95"] = None
    return out


def policy_scores(game: str, episodes: int, seed: int, max_steps: int,
                  action: str | None = None) -> list[float]:
    """Raw scores of ``episodes`` games under the evaluation protocol (no life loss, raw
    rewards, ``max_steps`` cap) of a uniformly random policy, or of always pressing the
    action named ``action`` (e.g. ``"UP"``)."""
    from hyperx.envs.atari import action_meanings, make_atari

    env = make_atari(game, num_envs=episodes, seed=seed, training=False)
    rng = np.random.default_rng(seed)
    fixed = None
    if action is not None:
        meanings = action_meanings(game)
        if action not in meanings:
            raise ValueError(f"action: expected one of {meanings} for {game}, got {action!r}")
        fixed = np.full(episodes, meanings.index(action))
    env.reset(seed=seed)
    score, done = np.zeros(episodes), np.zeros(episodes, bool)
    for _ in range(max_steps):
        actions = fixed if fixed is not None else rng.integers(0, env.num_actions, episodes)
        _, _, _, truncated, info = env.step(actions)
        score += np.where(done, 0.0, info["raw_reward"])
        done |= np.asarray(info["game_over"]) | np.asarray(truncated)
        if done.all():
            break
    env.close()
    return score.tolist()


def fixed_action_share_at_init(game: str, seed: int, action: str, indices: int = 256,
                               frames: int = 8) -> float:
    """Share of ``indices`` sampled indices whose greedy action at initialisation is ``action``
    on every one of ``frames`` frames of a uniformly random trajectory, for the ``hyperagent``
    seed that ``run_group`` runs as seed number ``seed`` (its agent key is
    ``fold_in(PRNGKey(seed), 0)``). On Freeway with ``"UP"``: 0 means no index walks the
    chicken up consistently before learning, so the first rewards must come from learning."""
    import jax
    import jax.numpy as jnp

    from hyperx.agents.config import get_config
    from hyperx.agents.core import make_agent
    from hyperx.envs.atari import OBS_SHAPE, action_meanings, make_atari
    from hyperx.index import make_index

    config = get_config("hyperagent", env="atari")
    env = make_atari(game, num_envs=1, seed=seed, training=True)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    stack = []
    for t in range(50 * frames):
        obs, *_ = env.step(rng.integers(0, env.num_actions, 1))
        if t % 50 == 0:
            stack.append(np.asarray(obs)[0])
    env.close()
    agent = make_agent(config, env.num_actions, jnp.zeros(OBS_SHAPE, jnp.uint8), step_budget=64)
    state = agent.init(jax.random.fold_in(jax.random.PRNGKey(seed), 0))
    xi = make_index(config.index, config.index_dim).sample(jax.random.PRNGKey(123), (indices,))
    q = jax.vmap(lambda x: agent.q_values(state.params, state.prior, jnp.asarray(np.stack(stack)),
                                          x[None]))(xi)  # (indices, frames, actions)
    wanted = action_meanings(game).index(action)
    return float(jnp.mean(jnp.all(jnp.argmax(q, -1) == wanted, axis=1)))


AGENTS = ("hyperagent", "dqn_100k")
"""``hyperagent``: the Atari config as it is; ``dqn_100k``: ``dqn`` with
:data:`hyperx.agents.config.DQN_100K`."""


def config_for(agent: str, args: argparse.Namespace):
    from hyperx.agents.config import DQN_100K, get_config

    name, overrides = (agent, {}) if agent == "hyperagent" else ("dqn", dict(DQN_100K))
    if args.learning_starts is not None:
        overrides.update(learning_starts=args.learning_starts, random_start=min(
            args.learning_starts, get_config(name, env="atari").random_start))
    return get_config(name, env="atari", **overrides)


def run_group(game: str, agent: str, first: int, count: int, args: argparse.Namespace) -> None:
    """Seeds ``first .. first + count - 1`` of ``agent`` on ``game`` in one program, resumed
    from their checkpoint; ``progress.json`` after every chunk, ``done`` at the end."""
    from hyperx.agents.atari import train_atari
    from hyperx.loop import Chunk

    name = f"seeds{first}-{first + count - 1}" if count > 1 else f"seed{first}"
    folder = os.path.join(args.out_dir, game, agent, name)
    os.makedirs(folder, exist_ok=True)
    progress_path = os.path.join(folder, "progress.json")
    if os.path.exists(progress_path):
        with open(progress_path) as f:
            if json.load(f).get("done"):
                print(f"{game} {agent} {name}: done, skipping", flush=True)
                return
    config = config_for(agent, args)
    start = time.perf_counter()
    timing = []

    def write(evaluations: list[dict], steps: int, done: bool) -> None:
        record = {"game": game, "agent": agent, "seeds": list(range(first, first + count)),
                  "base_seed": args.seed + first, "steps_done": steps, "steps": args.steps,
                  "config": repr(config), "evaluations": evaluations, "chunks": timing,
                  "done": done}
        tmp = progress_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, progress_path)

    def on_chunk(chunk: Chunk) -> None:
        m = chunk.metrics
        timing.append(dict(env_steps=chunk.done, steps_per_s=m["steps_per_s"],
                           wall_s=time.perf_counter() - start))
        write(m["evaluations"], chunk.done, False)
        evals = {e["env_step"]: e["score"] for e in m["evaluations"] if e["seed"] == 0}
        print(f"{game} {agent} {name}: {chunk.done}/{chunk.total} "
              f"{m['steps_per_s']:.1f} env steps/s; evaluations {evals}", flush=True)

    result = train_atari(config, game, steps=args.steps, seeds=count, envs_per_seed=1,
                         seed=args.seed + first, eval_every=args.eval_every,
                         eval_episodes=args.eval_episodes, eval_max_steps=args.eval_max_steps,
                         eval_at_start=args.eval_at_start, chunk_steps=args.chunk_steps,
                         checkpoint_dir=(os.path.join(folder, "checkpoints")
                                         if args.checkpoints else None), on_chunk=on_chunk)
    write(result.evaluations, result.steps_done, True)


def collect(game: str, agent: str, out_dir: str) -> dict:
    """Per evaluation step, one mean evaluation return per seed, from the progress files."""
    folder = os.path.join(out_dir, game, agent)
    evals: dict[int, list[float]] = {}
    runs = []
    if not os.path.isdir(folder):
        return {"evals": {}, "runs": []}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name, "progress.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            record = json.load(f)
        for e in record["evaluations"]:
            evals.setdefault(e["env_step"], []).append(e["score"])
        rates = [c["steps_per_s"] for c in record["chunks"]]
        runs.append({"run": name, "steps_done": record["steps_done"], "done": record["done"],
                     "base_seed": record["base_seed"],
                     "median_env_steps_per_s": float(np.median(rates)) if rates else None})
    return {"evals": {str(k): v for k, v in sorted(evals.items())}, "runs": runs}


def summarise(args: argparse.Namespace) -> dict:
    """The summary file and the plot from every progress file and the baselines."""
    import jax

    games = {}
    for game in args.games:
        entry = {"reference_hyperagent": REFERENCE.get(game),
                 "published_random": PUBLISHED_RANDOM.get(game)}
        baselines = os.path.join(args.out_dir, game, "baselines.json")
        if os.path.exists(baselines):
            with open(baselines) as f:
                entry["baselines"] = json.load(f)
        for agent in args.agents:
            got = collect(game, agent, args.out_dir)
            got["intervals"] = {step: t_interval(v) for step, v in got["evals"].items()}
            entry[agent] = got
        if game in FIXED_POLICIES and entry.get("hyperagent", {}).get("runs"):
            entry["hyperagent"]["fixed_action_share_at_init"] = init_shares(game, args)
        entry["checks"] = checks(entry, game)
        games[game] = entry
    summary = {
        "command": "python benchmarks/atari_parity.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items()
            if k not in ("out_dir", "summary", "summarise_only", "checkpoints", "eval_at_start")
            and v is not None) + ("" if args.eval_at_start else " --no-eval-at-start"),
        "device": str(jax.devices()[0]),
        "commit": commit(),
        "protocol": ("10-game evaluation at agent step 0 and every 20,000: no life loss, raw "
                     "scores, 27,000-step cap; hyperagent greedy on a fresh index per game, "
                     "dqn_100k epsilon-greedy with epsilon 0.001; one mean per seed; "
                     "intervals: 95% Student-t over seeds"),
        "reference": REFERENCE["source"],
        "games": games,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.summary)), exist_ok=True)
    with open(args.summary, "w") as f:
        json.dump(summary, f, indent=1)
    plot(summary, args.summary.replace(".json", ".png"))
    return summary


def commit() -> str:
    """The repository's HEAD, or ``"unknown"`` where git or the repository is absent (a copy
    of the working tree on a lent machine)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def init_shares(game: str, args: argparse.Namespace) -> dict[str, float]:
    """Per hyperagent seed run on ``game``, :func:`fixed_action_share_at_init` of the game's
    fixed policy's action, cached in the seed's folder (``init_probe.json``)."""
    name, action = FIXED_POLICIES[game]
    out = {}
    folder = os.path.join(args.out_dir, game, "hyperagent")
    for run in sorted(os.listdir(folder)):
        if not run.startswith("seed") or "-" in run:
            continue
        path = os.path.join(folder, run, "init_probe.json")
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump({"action": action, "share": fixed_action_share_at_init(
                    game, args.seed + int(run[4:]), action)}, f)
        with open(path) as f:
            out[run] = json.load(f)["share"]
    return out


def checks(entry: dict, game: str) -> dict:
    """The parity checks on hyperagent: the mean inside or above the reference's [min, max]
    at 20k and 40k steps, and every seed above random play at 40k (the published random
    score, and the one measured here under the same protocol)."""
    ours = entry.get("hyperagent", {}).get("evals", {})
    ref = REFERENCE.get(game) or {}
    out = {}
    for step in ("20000", "40000"):
        if step in ours and step in ref:
            mean = float(np.mean(ours[step]))
            out[f"mean_at_{step}_in_or_above_reference_range"] = bool(mean >= ref[step][1])
    measured = (entry.get("baselines") or {}).get("random", {}).get("mean")
    published = PUBLISHED_RANDOM.get(game)
    if "40000" in ours:
        for name, random in (("published", published), ("measured", measured)):
            if random is not None:
                out[f"every_seed_above_{name}_random_at_40000"] = bool(
                    min(ours["40000"]) > random)
    return out


def plot(summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = summary["games"]
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4.2), squeeze=False)
    for ax, (game, entry) in zip(axes[0], games.items(), strict=True):
        ref = entry.get("reference_hyperagent")
        if ref:
            steps = sorted(int(s) for s in ref)
            ax.plot(steps, [ref[str(s)][0] for s in steps], "k-", label="reference mean (5 seeds)")
            ax.fill_between(steps, [ref[str(s)][1] for s in steps],
                            [ref[str(s)][2] for s in steps], color="k", alpha=0.12,
                            label="reference [min, max]")
        for agent, color in (("hyperagent", "C0"), ("dqn_100k", "C1")):
            evals = entry.get(agent, {}).get("evals", {})
            if not evals:
                continue
            steps = sorted(int(s) for s in evals)
            for s in steps:
                ax.plot([s] * len(evals[str(s)]), evals[str(s)], "o", color=color, alpha=0.5,
                        ms=4)
            ax.plot(steps, [np.mean(evals[str(s)]) for s in steps], "-", color=color,
                    label=f"ours {agent} (mean; dots: seeds)")
        for name, style in (("random", "--"), ("always_up", ":")):
            base = (entry.get("baselines") or {}).get(name)
            if base:
                ax.axhline(base["mean"], color="gray", ls=style, label=name.replace("_", "-"))
        ax.set_xlabel("agent steps")
        ax.set_ylabel("evaluation return (10 games)")
        ax.set_title(game)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def baselines(game: str, args: argparse.Namespace) -> None:
    """Random (and fixed) policies on ``game`` under the evaluation protocol, once."""
    path = os.path.join(args.out_dir, game, "baselines.json")
    if os.path.exists(path) or args.random_episodes == 0:
        return
    out = {"random": t_interval(policy_scores(game, args.random_episodes, args.seed + 40_000,
                                              args.eval_max_steps))}
    out["random"]["interval_over"] = "games"
    if game in FIXED_POLICIES:
        name, action = FIXED_POLICIES[game]
        out[name] = t_interval(policy_scores(game, args.random_episodes, args.seed + 50_000,
                                             args.eval_max_steps, action))
        out[name]["interval_over"] = "games"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def groups(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(first seed, seed count) of each program: ``--only-seeds`` one by one, else seeds
    ``0 .. --seeds - 1`` in programs of ``--seeds-per-program``."""
    if args.only_seeds is not None:
        return [(s, 1) for s in args.only_seeds]
    return [(first, args.seeds_per_program)
            for first in range(0, args.seeds, args.seeds_per_program)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", nargs="+", default=["Alien"])
    parser.add_argument("--agents", nargs="+", default=["hyperagent"], choices=AGENTS)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None,
                        help="run just these seed numbers (one per program), e.g. 2 3 7")
    parser.add_argument("--seeds-per-program", type=int, default=1,
                        help="seeds vmapped in one program (CPU: 1; GPU: all)")
    parser.add_argument("--steps", type=int, default=40_000, help="agent steps per seed")
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--chunk-steps", type=int, default=5_000,
                        help="agent steps per compiled chunk and checkpoint")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--eval-max-steps", type=int, default=27_000)
    parser.add_argument("--random-episodes", type=int, default=30,
                        help="games of each baseline policy (0: no baselines)")
    parser.add_argument("--learning-starts", type=int, default=None,
                        help="override (tiny checks only; the reference's is 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-checkpoints", dest="checkpoints", action="store_false",
                        help="no orbax checkpoint per chunk (a GPU loan that cannot resume: "
                             "8 seeds' replays are ~6 GB a save)")
    parser.add_argument("--no-eval-at-start", dest="eval_at_start", action="store_false",
                        help="no step-0 evaluation (a short learning check on a GPU loan)")
    parser.add_argument("--out-dir", default=OUT_DIR)
    parser.add_argument("--summary", default=SUMMARY)
    parser.add_argument("--summarise-only", action="store_true",
                        help="rebuild the summary and plot from the progress files")
    args = parser.parse_args()
    if args.seeds % args.seeds_per_program:
        parser.error(f"--seeds-per-program: expected a divisor of --seeds = {args.seeds}, "
                     f"got {args.seeds_per_program}")
    if args.random_episodes < 0:
        parser.error(f"--random-episodes: expected a number of games >= 0, got "
                     f"{args.random_episodes}")
    if args.only_seeds is not None and (args.seeds_per_program != 1 or min(args.only_seeds) < 0):
        parser.error(f"--only-seeds: expected seed numbers >= 0 with --seeds-per-program 1, got "
                     f"{args.only_seeds} with {args.seeds_per_program}")
    if not args.summarise_only:
        for game in args.games:
            baselines(game, args)
            for agent in args.agents:
                for first, count in groups(args):
                    run_group(game, agent, first, count, args)
                    summarise(args)
    summary = summarise(args)
    for game, entry in summary["games"].items():
        for agent in args.agents:
            print(game, agent, {s: round(float(np.mean(v)), 1)
                                for s, v in entry[agent]["evals"].items()})
        print(game, "baselines", {k: round(v["mean"], 1)
                                  for k, v in (entry.get("baselines") or {}).items()},
              "checks", entry["checks"])
    print(f"wrote {args.summary}")


if __name__ == "__main__":
    main()
