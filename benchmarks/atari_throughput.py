"""Atari training throughput: our compiled loop against a Python-driven loop of the same agent.

Both drivers train the same agent (same Nature CNN, batch 32, one gradient step every
``update_every`` = 4 env steps, the same jitted update) on the same game:

* ``compiled``: :func:`hyperx.agents.atari.train_atari`, the whole loop (XLA env step, act,
  store in the frame replay, update, target sync) one ``lax.scan``, with one game per agent
  (the comparison row) and with four (one batched forward for 4 env steps);
* ``python_loop``: our agent driven the way CleanRL's ``dqn_atari_jax.py`` drives its own (one
  environment stepped from Python, a jitted action per step, a jitted store, a jitted update
  every 4 steps). It is OUR imitation of that design, not CleanRL's script: it answers what
  compiling the loop buys THIS agent (same update, same replay, only the driver differs), not
  how fast CleanRL is;
* ``cleanrl`` (with ``--cleanrl SOURCE``): CleanRL's own ``cleanrl/dqn_atari_jax.py`` at
  :data:`cleanrl_env.COMMIT`, unchanged, in its own venv (:mod:`cleanrl_env` lists the
  versions; :mod:`cleanrl_peer` the two run-time changes, both outside its code), its
  training-phase env steps/s timed after ``learning_starts`` = 1000 and 200 more steps (its
  first update's compile). Interleaved with our compiled dqn loop (512 units, one game) at
  CleanRL's settings (:data:`CLEANRL_SETTINGS`) and at our own (double Q, 3-step, clip 10),
  ``--rounds`` rounds per condition, the order reversed every other round, the load average
  before each run recorded; conditions ``quiet`` and ``loaded`` (one core busy with a
  foreign spinning process). Rows ``"driver": "cleanrl"`` beside ``"driver": "compiled"``.

Also measured: the time of one gradient step at the top level (a jitted update on a filled
replay) and inside the loop (``update_every x`` the per-env-step time of the 1-game compiled
loop that learns minus that of the same loop that never learns), the update-bound limit
``update_every / t_update_in_loop`` (env steps/s if the env and acting cost nothing; the loop's
own rate is below it by construction), our fraction of it, the replay bytes per 100k
transitions, and how throughput scales with the number of agents in one program.

Env steps per second are summed over agents and measured after compilation, both designs in
this process. Writes benchmarks/results/atari_throughput.json. Full run with CleanRL: about 40
minutes on 2 CPU cores, ``python benchmarks/atari_throughput.py --cleanrl
https://github.com/vwxyzjn/cleanrl`` (a local clone or mirror of it works too); tiny check:
``python benchmarks/atari_throughput.py --steps 64 --agents-grid 1 --out /tmp/t.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import cleanrl_env
import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import plural
from hyperx.agents import Transition, get_config
from hyperx.agents.atari import train_atari
from hyperx.agents.core import make_agent
from hyperx.envs.atari import OBS_SHAPE, make_atari
from hyperx.replay import replay_bytes
from hyperx.replay_frames import make_frame_replay

OUT = os.path.join(os.path.dirname(__file__), "results", "atari_throughput.json")
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cleanrl_peer.py")
CLEANRL_SETTINGS = dict(double_q=False, n_step=1, max_grad_norm=None, adam_eps=1e-8,
                        target_update_period=250)
"""Our dqn config's fields set to CleanRL's dqn_atari_jax.py: no double Q, 1-step targets, no
gradient clipping, Adam eps 1e-8 (lr 1e-4 and batch 32 are already the same), the target
synced every 1000 env steps = 250 gradient steps; plus the benchmark's 512 units, one update
per 4 env steps, replay of 20k. The loss is the same mean squared TD error. Left as ours: the
replay samples in the graph (CleanRL's in NumPy, from SB3's buffer), the head is our
hypermodel head with a one-hot index of width 1 (a linear layer)."""


def config(agent: str, learning_starts: int, width: int = 256, **overrides) -> object:
    """The benchmark's config of ``agent``: a ``width``-unit Nature CNN for both agents
    (``overrides``: further config fields)."""
    return get_config(agent, env="atari", **{
        **dict(update_every=4, batch_size=32, torso_widths=(width,), buffer_size=20_000,
               learning_starts=learning_starts), **overrides})


def compiled(agent: str, game: str, steps: int, seeds: int, envs: int,
             learning_starts: int = 64, width: int = 256, **overrides) -> dict:
    """Our compiled loop: ``seeds`` agents x ``envs`` games in one program (``learning_starts``
    beyond ``steps``: a loop that never learns)."""
    result = train_atari(config(agent, learning_starts, width, **overrides), game, steps=steps,
                         seeds=seeds, envs_per_seed=envs, eval_episodes=0)
    return {"driver": "compiled", "agent": agent, "seeds": seeds, "envs_per_seed": envs,
            "learns": learning_starts < steps, "env_steps": result.steps_done * seeds,
            "compile_time_s": result.compile_time_s,
            "env_steps_per_s": result.env_steps_per_s}


def python_loop(agent: str, game: str, steps: int) -> dict:
    """The CleanRL design: one env, a Python loop, a jitted update every 4 steps."""
    cfg = config(agent, 10**9)  # observe only stores; the loop calls the update itself
    env = make_atari(game, num_envs=1)
    jitted = make_agent(cfg, env.num_actions, jnp.zeros(OBS_SHAPE, jnp.uint8),
                        step_budget=steps + 64).jit()
    keys = jax.jit(lambda k: tuple(jax.random.split(k, 4)))

    def run(n: int, state, key, obs):
        start = time.perf_counter()
        for t in range(n):
            key, k_act, k_obs, k_upd = keys(key)
            action = int(jitted.act(state, k_act, obs))
            next_obs, reward, term, trunc, info = env.step(np.array([action]))
            if not info["reset_step"][0]:
                state = jitted.observe(state, k_obs, Transition(
                    obs, jnp.int32(action), jnp.float32(reward[0]), next_obs[0],
                    jnp.bool_(term[0]), jnp.bool_(trunc[0])))
            if t % 4 == 3 and int(state.replay.num_added) >= cfg.batch_size:
                state = jitted.update(state, k_upd)
            obs = next_obs[0]
        jax.block_until_ready(state)
        return time.perf_counter() - start, state, key, obs

    obs, _ = env.reset()
    state = jitted.init(jax.random.PRNGKey(0))
    _, state, key, obs = run(64, state, jax.random.PRNGKey(1), obs[0])  # compile, warm up
    elapsed, state, _, _ = run(steps, state, key, obs)
    env.close()
    return {"driver": "python_loop", "agent": agent, "seeds": 1, "envs_per_seed": 1,
            "env_steps": steps, "env_steps_per_s": steps / elapsed}


def update_time(agent: str, game: str, repeats: int = 20) -> float:
    """Seconds per gradient step: the jitted update at the top level on a filled replay."""
    cfg = config(agent, 10**9)
    env = make_atari(game, num_envs=1)
    agent_fns = make_agent(cfg, env.num_actions, jnp.zeros(OBS_SHAPE, jnp.uint8),
                           num_envs=1, replay=make_frame_replay, step_budget=4096)
    state = jax.jit(agent_fns.init)(jax.random.PRNGKey(0))
    obs, _ = env.reset()
    observe = jax.jit(agent_fns.observe)
    first = True
    from hyperx.agents.core import BatchTransition

    for t in range(256):
        action = np.random.default_rng(t).integers(0, env.num_actions, 1)
        next_obs, reward, term, trunc, info = env.step(action)
        state = observe(state, jax.random.PRNGKey(t), BatchTransition(
            jnp.asarray(obs), jnp.asarray(action, jnp.int32), jnp.asarray(reward),
            jnp.asarray(term), jnp.asarray(trunc), jnp.bool_([first]),
            jnp.asarray(~info["reset_step"])))
        first = bool(info["reset_step"][0])
        obs = next_obs
    env.close()
    update = jax.jit(agent_fns.update)
    jax.block_until_ready(update(state, jax.random.PRNGKey(0)))
    start = time.perf_counter()
    for i in range(repeats):
        state = update(state, jax.random.PRNGKey(i))
    jax.block_until_ready(state)
    return (time.perf_counter() - start) / repeats


def replay_bytes_per_100k(agent: str) -> int:
    cfg = get_config(agent, env="atari")
    replay = make_frame_replay(cfg.n_step, cfg.gamma)
    example = dict(obs=np.zeros(OBS_SHAPE, np.uint8), action=0, reward=0.0, terminal=False,
                   truncated=False, first=False, z=np.zeros(cfg.index_dim, np.float32))
    return replay_bytes(jax.eval_shape(lambda e: replay.init(100_000, e), example))


def cleanrl_train(python: str, checkout: str, game: str, steps: int,
                  learning_starts: int = 1000, warmup: int = 200) -> dict:
    """CleanRL's dqn_atari_jax.py, unchanged, in its own environment: env steps/s over the
    last ``steps`` steps, after ``learning_starts`` and ``warmup`` more steps (which hold the
    first compiled update)."""
    with tempfile.TemporaryDirectory() as tmp:  # the script writes runs/ into its cwd
        out = os.path.join(tmp, "times.json")
        subprocess.run([python, PEER, "train", "--checkout", checkout, "--out", out, "--",
                        "--env-id", f"{game}NoFrameskip-v4", "--seed", "1",
                        "--total-timesteps", str(learning_starts + warmup + steps + 1),
                        "--learning-starts", str(learning_starts), "--buffer-size", "20000"],
                       cwd=tmp, env=cleanrl_env.environ(), check=True,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            times = json.load(f)["step_times"]
    first = learning_starts + warmup
    return {"driver": "cleanrl", "agent": "dqn", "settings": "cleanrl", "seeds": 1,
            "envs_per_seed": 1, "env_steps": len(times) - 1 - first,
            "env_steps_per_s": (len(times) - 1 - first) / (times[-1] - times[first])}


@contextlib.contextmanager
def busy_core(on: bool):
    """A foreign process spinning on one core while the block runs (``on``)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def peer_rounds(python: str, checkout: str, game: str, steps: int, rounds: int,
                condition: str) -> list[dict]:
    """``rounds`` interleaved rounds of CleanRL's script and our compiled dqn loop (CleanRL's
    settings and our own), the order reversed every other round; ``condition`` "quiet" or
    "loaded" (one core busy with a foreign process)."""
    runs = [("cleanrl", lambda: cleanrl_train(python, checkout, game, steps)),
            ("cleanrl_settings", lambda: compiled("dqn", game, steps, 1, 1, learning_starts=32,
                                                  width=512, **CLEANRL_SETTINGS)),
            ("own_settings", lambda: compiled("dqn", game, steps, 1, 1, learning_starts=32,
                                              width=512))]
    rows = []
    with busy_core(condition == "loaded"):
        for r in range(rounds):
            for settings, run in (runs if r % 2 == 0 else runs[::-1]):
                load = os.getloadavg()
                row = run()
                row.update(settings="cleanrl" if settings != "own_settings" else "own",
                           round=r, condition=condition, load_average_before=load)
                rows.append(row)
                print(f"{condition} round {r}: {row['driver']} ({row['settings']} settings) "
                      f"{row['env_steps_per_s']:.1f} env steps/s, load {load[0]:.2f}",
                      flush=True)
    return rows


def peer_summary(rows: list[dict]) -> dict:
    """Per condition: medians, ranges and the median of the per-round ratios ours/CleanRL."""
    def pick(condition: str, driver: str, settings: str) -> dict[int, float]:
        return {r["round"]: r["env_steps_per_s"] for r in rows if r["condition"] == condition
                and r["driver"] == driver and r["settings"] == settings}

    out = {}
    for condition in sorted({r["condition"] for r in rows}):
        peer = pick(condition, "cleanrl", "cleanrl")
        entry = {"cleanrl_median": float(np.median(list(peer.values()))),
                 "cleanrl_range": [min(peer.values()), max(peer.values())],
                 "rounds": len(peer)}
        for settings in ("cleanrl", "own"):
            ours = pick(condition, "compiled", settings)
            ratios = [ours[k] / peer[k] for k in peer]
            entry[f"ours_{settings}_settings_median"] = float(np.median(list(ours.values())))
            entry[f"ours_{settings}_settings_range"] = [min(ours.values()), max(ours.values())]
            entry[f"ratio_{settings}_settings_median"] = float(np.median(ratios))
            entry[f"ratio_{settings}_settings_range"] = [min(ratios), max(ratios)]
        out[condition] = entry
    return out


def write_result(result: dict, out: str) -> None:
    """Write ``result`` as JSON to ``out`` (its folder made)."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--agents", nargs="*", default=["hyperagent", "dqn"])
    parser.add_argument("--steps", type=int, default=1024, help="env steps per agent")
    parser.add_argument("--agents-grid", type=int, nargs="+", default=[1, 4, 16],
                        help="agents (seeds) per program for the scaling rows")
    parser.add_argument("--cleanrl", default=None,
                        help="where to clone CleanRL from (a URL, or a local clone) for the "
                             "A/B against its own script; none: no CleanRL rows")
    parser.add_argument("--cleanrl-root", default=cleanrl_env.ROOT,
                        help="where CleanRL's checkout and venv are kept")
    parser.add_argument("--rounds", type=int, default=5, help="A/B rounds per condition")
    parser.add_argument("--peer-steps", type=int, default=2048,
                        help="training env steps per run in the A/B")
    parser.add_argument("--conditions", nargs="+", default=["quiet", "loaded"],
                        choices=["quiet", "loaded"],
                        help="the A/B's machine states (loaded: one core busy)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    rows, summary, peer = [], {}, {}
    if args.cleanrl:
        python, checkout = cleanrl_env.ensure(args.cleanrl, args.cleanrl_root)
        peer_rows = [row for condition in args.conditions for row in peer_rounds(
            python, checkout, args.game, args.peer_steps, args.rounds, condition)]
        rows += peer_rows
        peer = {"summary": peer_summary(peer_rows), "cleanrl_commit": cleanrl_env.COMMIT,
                "cleanrl_versions": cleanrl_env.versions(python),
                "settings": {"cleanrl": CLEANRL_SETTINGS, "width": 512, "update_every": 4,
                             "batch_size": 32, "buffer_size": 20_000,
                             "cleanrl_learning_starts": 1000, "cleanrl_warmup_steps": 200}}
        print(json.dumps(peer["summary"], indent=1), flush=True)
    for agent in args.agents:
        t_update = update_time(agent, args.game)
        print(f"{agent}: {t_update * 1e3:.1f} ms per gradient step (top level)", flush=True)
        loop = python_loop(agent, args.game, args.steps)
        print(f"{agent}: python loop {loop['env_steps_per_s']:.1f} env steps/s", flush=True)
        ours = compiled(agent, args.game, args.steps, 1, 1)
        idle = compiled(agent, args.game, args.steps, 1, 1, learning_starts=10**9)
        four = compiled(agent, args.game, args.steps, 1, 4)
        print(f"{agent}: compiled {ours['env_steps_per_s']:.1f} env steps/s (1 game), "
              f"{idle['env_steps_per_s']:.1f} without learning, {four['env_steps_per_s']:.1f} "
              f"with 4 games", flush=True)
        t_in_loop = 4 * (1 / ours["env_steps_per_s"] - 1 / idle["env_steps_per_s"])
        limit = 4 / t_in_loop
        summary[agent] = {
            "update_s": t_update, "update_in_loop_s": t_in_loop,
            "update_bound_env_steps_per_s": limit,
            "compiled_env_steps_per_s": ours["env_steps_per_s"],
            "compiled_no_learning_env_steps_per_s": idle["env_steps_per_s"],
            "compiled_4_games_env_steps_per_s": four["env_steps_per_s"],
            "python_loop_env_steps_per_s": loop["env_steps_per_s"],
            "ratio_compiled_to_python_loop": ours["env_steps_per_s"] / loop["env_steps_per_s"],
            "fraction_of_update_bound": ours["env_steps_per_s"] / limit,
            "replay_bytes_per_100k": replay_bytes_per_100k(agent)}
        rows += [loop, ours, idle, four]
        for seeds in args.agents_grid:
            row = dict(compiled(agent, args.game, args.steps, seeds, 1), grid=True)
            rows.append(row)
            print(f"{agent}: {plural(seeds, 'agent')} {row['env_steps_per_s']:.1f} env steps/s",
                  flush=True)
        print(json.dumps(summary[agent], indent=1), flush=True)
    result = {"game": args.game, "steps_per_agent": args.steps, "update_every": 4,
              "batch_size": 32, "backend": "envpool", "load_average": os.getloadavg(),
              "device": str(jax.devices()[0]),
              "platform": jax.default_backend(), "summary": summary, "cleanrl": peer,
              "rows": rows,
              "command": "python benchmarks/atari_throughput.py " + " ".join(
                  f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                  for k, v in vars(args).items() if k != "out" and v is not None)}
    write_result(result, args.out)


if __name__ == "__main__":
    main()
