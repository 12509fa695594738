"""CleanRL's own code, run and timed under CleanRL's environment (instrumentation only).

This file runs under the CleanRL environment's Python (built by
:mod:`benchmarks.cleanrl_env`), never ours, and imports nothing of hyperx. Two commands:

``train``: executes ``cleanrl/dqn_atari_jax.py`` from a CleanRL checkout with ``runpy`` as
``__main__`` with its own command line, and records ``time.perf_counter()`` after every env
step. What it changes, all at run time, none of it in CleanRL's code:

1. ``import ale_py`` before the script: CleanRL pins ale-py 0.8.1 with gymnasium 0.29.1, whose
   Atari ids came from the ROMs AutoROM downloads (no network here); ale-py 0.9.0 ships the
   ROMs and registers ``BreakoutNoFrameskip-v4`` and the other ids when it is imported.
2. ``gymnasium.vector.SyncVectorEnv.step`` is wrapped to record the time after every env step
   (the script's one call per global step); the times go to ``--out`` as JSON when the script
   ends. Nothing in the step, the action, the replay or the update changes.

``update``: times one gradient step of CleanRL's networks as its scripts take it: the PyTorch
``QNetwork`` of ``cleanrl/dqn_atari.py`` (``torch.set_num_threads(threads)``; target forward
under ``no_grad``, MSE, Adam 1e-4, ``zero_grad``/``backward``/``step``) and the flax
``QNetwork`` of ``cleanrl/dqn_atari_jax.py`` (``flax.linen.Conv``) in that script's jitted
``update``, at the top level and inside ``lax.scan`` (where a compiled loop would run it).
The network classes are imported from the checkout; the ten lines of each update are the
scripts' own, repeated here because the scripts define them inside ``__main__``.

Usage: ``python cleanrl_peer.py train --checkout DIR --out times.json -- ARGS`` or
``python cleanrl_peer.py update --checkout DIR --out update.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import types

BATCH, ACTIONS, REPEATS = 32, 4, 8


def train(checkout: str, out: str, script_args: list[str]) -> None:
    """Run ``cleanrl/dqn_atari_jax.py`` with ``script_args``, writing its env-step times."""
    import ale_py  # noqa: F401  (registers the Atari ids with gymnasium)
    import gymnasium

    times: list[float] = []
    step = gymnasium.vector.SyncVectorEnv.step

    def timed_step(self, actions):
        result = step(self, actions)
        times.append(time.perf_counter())
        return result

    gymnasium.vector.SyncVectorEnv.step = timed_step
    script = os.path.join(checkout, "cleanrl", "dqn_atari_jax.py")
    sys.argv = [script, *script_args]
    start = time.perf_counter()
    runpy.run_path(script, run_name="__main__")
    with open(out, "w") as f:
        json.dump({"start": start, "step_times": times, "argv": script_args}, f)


def _batches(n: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return [(rng.integers(0, 256, (BATCH, 4, 84, 84), dtype=np.uint8),
             rng.integers(0, ACTIONS, (BATCH, 1)),
             rng.integers(0, 256, (BATCH, 4, 84, 84), dtype=np.uint8),
             rng.random(BATCH, dtype=np.float32), np.zeros(BATCH, np.float32))
            for _ in range(n)]


def _seconds(run, rounds: int = 5) -> list[float]:
    """Per-update seconds of ``rounds`` calls of ``run`` (each does REPEATS updates)."""
    run()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        out.append((time.perf_counter() - start) / REPEATS)
    return out


def torch_update(threads: int) -> list[float]:
    """cleanrl/dqn_atari.py's gradient step, ``threads`` intra-op threads."""
    import torch
    import torch.nn.functional as F
    from cleanrl.dqn_atari import QNetwork

    torch.set_num_threads(threads)
    env = types.SimpleNamespace(single_action_space=types.SimpleNamespace(n=ACTIONS))
    q_network, target_network = QNetwork(env), QNetwork(env)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4)
    batches = [tuple(torch.from_numpy(a) for a in b) for b in _batches(REPEATS)]

    def run():
        for observations, actions, next_observations, rewards, dones in batches:
            with torch.no_grad():
                target_max, _ = target_network(next_observations).max(dim=1)
                td_target = rewards.flatten() + 0.99 * target_max * (1 - dones.flatten())
            old_val = q_network(observations).gather(1, actions).squeeze()
            loss = F.mse_loss(td_target, old_val)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return _seconds(run)


def flax_update() -> dict[str, list[float]]:
    """cleanrl/dqn_atari_jax.py's jitted update, at the top level and inside ``lax.scan``."""
    import jax
    import jax.numpy as jnp
    import optax
    from cleanrl.dqn_atari_jax import QNetwork

    q_network = QNetwork(action_dim=ACTIONS)
    batches = [tuple(jnp.asarray(a) for a in b) for b in _batches(REPEATS)]
    params = q_network.init(jax.random.PRNGKey(0), batches[0][0])
    tx = optax.adam(learning_rate=1e-4)

    def update(carry, batch):
        params, target_params, opt_state = carry
        observations, actions, next_observations, rewards, dones = batch
        q_next_target = q_network.apply(target_params, next_observations).max(axis=-1)
        next_q_value = rewards + (1 - dones) * 0.99 * q_next_target

        def mse_loss(params):
            q_pred = q_network.apply(params, observations)
            q_pred = q_pred[jnp.arange(q_pred.shape[0]), actions.squeeze()]
            return ((q_pred - next_q_value) ** 2).mean()

        loss, grads = jax.value_and_grad(mse_loss)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return (optax.apply_updates(params, updates), target_params, opt_state), loss

    state = {"carry": (params, params, tx.init(params))}
    top = jax.jit(update)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *batches)
    in_scan = jax.jit(lambda c, b: jax.lax.scan(update, c, b))

    def run_top():
        for batch in batches:
            state["carry"], _ = top(state["carry"], batch)
        jax.block_until_ready(state["carry"])

    def run_scan():
        state["carry"], _ = in_scan(state["carry"], stacked)
        jax.block_until_ready(state["carry"])

    return {"top_level": _seconds(run_top), "in_scan": _seconds(run_scan),
            "versions": {"jax": jax.__version__}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "update"))
    parser.add_argument("--checkout", required=True, help="a CleanRL checkout")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])  # after --: dqn_atari_jax.py's own arguments
    sys.path.insert(0, os.path.abspath(args.checkout))  # cleanrl, cleanrl_utils
    if args.command == "train":
        train(args.checkout, args.out, argv[split + 1:])
        return
    import torch

    result = {"pytorch": torch_update(args.threads), "pytorch_threads": args.threads,
              "torch": torch.__version__, "flax": flax_update()}
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
