"""DeepSea training throughput: one compiled scan over seeds vs a Python loop over steps.

Full training (acting + one gradient step per env step) of HyperAgent on DeepSea(N):

* scan: :func:`hyperx.agents.deepsea.train_deepsea`, the whole run one ``lax.scan`` with
  1, 8 and 64 seeds vmapped;
* loop: a Python loop calling the SAME jitted ``agent.act`` and ``agent.observe`` (which
  stores and runs the update) and a jitted env step once per step, ``block_until_ready``
  each step (how a host-side environment would drive the agent), one seed.

Env steps per second are summed over seeds, measured after compilation. Writes
benchmarks/results/deepsea_throughput.json. Full run: about 3-5 minutes on 2 CPU cores.
Tiny check: ``python benchmarks/deepsea_throughput.py --seeds 1 2 --steps 200 --out /tmp/t.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp

from hyperx.agents import Transition, get_config
from hyperx.agents.deepsea import make_program, state_id, train_deepsea
from hyperx.envs import deepsea

OUT = os.path.join(os.path.dirname(__file__), "results", "deepsea_throughput.json")


def scan_throughput(agent: str, size: int, steps: int, seeds: int) -> dict:
    """Env steps/s of the compiled scan with ``seeds`` vmapped seeds."""
    result = train_deepsea(get_config(agent), size, max(steps // size, 1), num_seeds=seeds,
                           chunk_steps=steps)
    return {"driver": "scan", "seeds": seeds, "env_steps": result.steps_done * seeds,
            "compile_time_s": result.compile_time_s, "run_time_s": result.wall_time_s,
            "env_steps_per_s": result.env_steps_per_s}


def loop_throughput(agent: str, size: int, steps: int) -> dict:
    """Env steps/s of a Python loop over the jitted act / observe / env step (one seed)."""
    program = make_program(get_config(agent), size, max(steps // size, 1))
    jitted = program.agent.jit()
    params = deepsea.make_params(deepsea.bsuite_mapping(size))

    @jax.jit
    def env_step(env_state, obs, action):
        out = deepsea.step(params, env_state, action)
        transition = Transition(obs, action, out.reward, state_id(out.state, size), out.done,
                                jnp.bool_(False))
        next_state = deepsea.auto_reset(params, out.state)
        return next_state, state_id(next_state, size), transition

    keys = jax.jit(lambda k: tuple(jax.random.split(k, 3)))

    def run(n: int) -> float:
        key = jax.random.PRNGKey(0)
        state = jitted.init(key)
        env_state, _ = deepsea.reset(params)
        obs = state_id(env_state, size)
        start = time.perf_counter()
        for _ in range(n):
            key, k_act, k_obs = keys(key)
            action = jitted.act(state, k_act, obs)
            env_state, next_obs, transition = env_step(env_state, obs, action)
            state = jitted.observe(state, k_obs, transition)
            obs = next_obs
            jax.block_until_ready(state)
        return time.perf_counter() - start

    start = time.perf_counter()
    run(max(program.agent.config.learning_starts + 2, 2))
    compile_time = time.perf_counter() - start
    elapsed = run(steps)
    return {"driver": "python_loop", "seeds": 1, "env_steps": steps,
            "compile_time_s": compile_time, "run_time_s": elapsed,
            "env_steps_per_s": steps / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="hyperagent")
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3000, help="env steps per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    rows = [loop_throughput(args.agent, args.size, args.steps)]
    print(rows[-1], flush=True)
    for seeds in args.seeds:
        rows.append(scan_throughput(args.agent, args.size, args.steps, seeds))
        print(rows[-1], flush=True)
    loop = rows[0]["env_steps_per_s"]
    result = {"agent": args.agent, "size": args.size, "steps_per_seed": args.steps,
              "device": str(jax.devices()[0]), "cpu_count": os.cpu_count(), "rows": rows,
              "scan_over_loop": {str(r["seeds"]): r["env_steps_per_s"] / loop
                                 for r in rows[1:]}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result["scan_over_loop"], indent=2))


if __name__ == "__main__":
    main()
