"""One Nature-CNN DQN gradient step on CPU, four ways, and the update our Atari loop runs.

All on the same batch shapes (32 stacks of 4 x 84 x 84 uint8 frames, 4 actions, 512 units),
the same update (CleanRL's: target forward, MSE on the taken action, Adam 1e-4):

* ``pytorch``: CleanRL's ``cleanrl/dqn_atari.py`` network and update, 2 threads;
* ``flax_conv``: CleanRL's ``cleanrl/dqn_atari_jax.py`` network (``flax.linen.Conv``) and
  jitted update, at the top level and inside ``lax.scan``;
* ``patch_conv``: the same update with our torso (:class:`hyperx.heads.NatureCNN`, the
  convolutions as :class:`hyperx.heads.PatchConv`), at the top level and inside ``lax.scan``,
  in a fresh process under the default XLA:CPU flags and under each of :data:`FLAGS`;
* ``slices`` and ``slices_bf16``: the patches as ``k * k`` strided slices of float frames
  (the form before the block form), with float32 and with bfloat16 matmul operands
  (accumulated in float32; the relative error of loss and gradient against float32 is in the
  summary);
* ``agent_in_loop``: our dqn agent's whole update inside the compiled Atari loop, with
  CleanRL's settings (no double Q, 1-step, no clipping, Adam eps 1e-8) and with its own,
  ``update_every x`` (per-env-step time of the loop that learns minus the loop that never does).

The two CleanRL rows run under CleanRL's own environment (:mod:`cleanrl_env`,
:mod:`cleanrl_peer`). ``--rounds`` rounds each time every row once (the machine's drift shared
by all rows); the rows are medians over rounds, the ratio to PyTorch the median of per-round
ratios. Writes benchmarks/results/atari_update.json. Run (about 10 minutes on 2 cores, plus
the CleanRL environment's first build): ``python benchmarks/atari_update.py
--cleanrl https://github.com/vwxyzjn/cleanrl`` (a local clone or mirror works too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import cleanrl_env
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from atari_throughput import CLEANRL_SETTINGS, compiled, write_result

from hyperx.heads import NatureCNN

OUT = os.path.join(os.path.dirname(__file__), "results", "atari_update.json")
BATCH, ACTIONS, REPEATS = 32, 4, 8
FLAGS = ("--xla_cpu_use_thunk_runtime=false", "--xla_cpu_enable_fast_math=true",
         "--xla_cpu_prefer_vector_width=512", "--xla_cpu_use_onednn=true",
         "--xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,"
         "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION",
         "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT",
         "--xla_cpu_experimental_ynn_fusion_type=")
class SlicedCNN(nn.Module):
    """The Nature CNN as PatchConv computed it before the block form: frames cast to float
    first, each layer's patches ``k * k`` strided slices (NatureCNN's parameter shapes).
    ``bf16``: every matmul's operands in bfloat16, accumulated in float32."""

    hidden: int = 512
    bf16: bool = False

    def dot(self, x, w):
        if not self.bf16:
            return x @ w
        return jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                       preferred_element_type=jnp.float32)

    @nn.compact
    def __call__(self, x):
        h = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        for i, (f, k, s) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1))):
            kernel = self.param(f"kernel_{i}", nn.initializers.lecun_normal(),
                                (k, k, h.shape[-1], f))
            oh, ow = (h.shape[1] - k) // s + 1, (h.shape[2] - k) // s + 1
            patches = jnp.concatenate([h[:, u:u + s * (oh - 1) + 1:s, v:v + s * (ow - 1) + 1:s]
                                       for u in range(k) for v in range(k)], axis=-1)
            h = nn.relu(self.dot(patches, kernel.reshape(-1, f)) + self.param(
                f"bias_{i}", nn.initializers.zeros_init(), (f,)))
        h = h.reshape(h.shape[0], -1)
        kernel = self.param("dense", nn.initializers.lecun_normal(), (h.shape[-1], self.hidden))
        return nn.relu(self.dot(h, kernel) + self.param(
            "dense_bias", nn.initializers.zeros_init(), (self.hidden,)))


class QNet(nn.Module):
    """A torso and a linear head onto the actions (CleanRL's QNetwork shape)."""

    torso: str = "patch_conv"

    @nn.compact
    def __call__(self, x):
        torso = (SlicedCNN(bf16=self.torso == "slices_bf16") if self.torso.startswith("slices")
                 else NatureCNN(hidden=512, channels_first=True))
        return nn.Dense(ACTIONS)(torso(x))


def batches(n: int) -> tuple:
    """``n`` stacked random batches (obs, action, next obs, reward, done)."""
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.integers(0, 256, (n, BATCH, 4, 84, 84), dtype=np.uint8)),
            jnp.asarray(rng.integers(0, ACTIONS, (n, BATCH))),
            jnp.asarray(rng.integers(0, 256, (n, BATCH, 4, 84, 84), dtype=np.uint8)),
            jnp.asarray(rng.random((n, BATCH), dtype=np.float32)), jnp.zeros((n, BATCH)))


def make_update(torso: str):
    """CleanRL's update (as cleanrl/dqn_atari_jax.py) with our torso; (update, carry)."""
    net, tx = QNet(torso), optax.adam(1e-4)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((BATCH, 4, 84, 84), jnp.uint8))

    def update(carry, batch):
        params, target_params, opt_state = carry
        obs, action, next_obs, reward, done = batch
        target = reward + (1 - done) * 0.99 * net.apply(target_params, next_obs).max(-1)

        def loss_fn(p):
            q = net.apply(p, obs)[jnp.arange(BATCH), action]
            return ((q - target) ** 2).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return (optax.apply_updates(params, updates), target_params, opt_state), (loss, grads)

    return update, (params, params, tx.init(params))


def time_update(torso: str, rounds: int = 5) -> dict:
    """Seconds per update at the top level and inside ``lax.scan`` (min and median of
    ``rounds`` rounds of REPEATS updates)."""
    update, carry = make_update(torso)
    data = batches(REPEATS)
    top = jax.jit(update)
    in_scan = jax.jit(lambda c, b: jax.lax.scan(update, c, b))
    rows = [jax.tree.map(lambda x, i=i: x[i], data) for i in range(REPEATS)]

    def run_top(c):
        for row in rows:
            c, _ = top(c, row)
        return c

    out = {}
    for name, run in (("top_level", run_top), ("in_scan", lambda c: in_scan(c, data)[0])):
        c = jax.block_until_ready(run(carry))
        seconds = []
        for _ in range(rounds):
            start = time.perf_counter()
            c = jax.block_until_ready(run(c))
            seconds.append((time.perf_counter() - start) / REPEATS)
        out[name] = {"min_s": min(seconds), "median_s": float(np.median(seconds))}
    return out


def bf16_error() -> dict:
    """Relative error of the loss and the gradient with bf16 matmul operands against float32
    (the same parameters and batch, :class:`SlicedCNN`)."""
    row = jax.tree.map(lambda x: x[0], batches(1))
    update, carry = make_update("slices")
    loss, grads = jax.jit(update)(carry, row)[1]
    update16, _ = make_update("slices_bf16")
    loss16, grads16 = jax.jit(update16)(carry, row)[1]
    g, g16 = (jnp.concatenate([x.ravel() for x in jax.tree.leaves(t)]) for t in (grads, grads16))
    return {"loss": float(abs(loss16 - loss) / abs(loss)),
            "grad": float(jnp.linalg.norm(g16 - g) / jnp.linalg.norm(g))}


def under_flags(flags: str) -> dict:
    """The patch_conv timings in a fresh process with ``XLA_FLAGS=flags``."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, XLA_FLAGS=flags)
        subprocess.run([sys.executable, __file__, "--patch-only", "--out", f.name],
                       env=env, check=True)
        with open(f.name) as g:
            return json.load(g)


def agent_in_loop(settings: dict, steps: int) -> dict:
    """Our dqn agent's update inside the 1-game compiled loop (512 units), in seconds."""
    learn = compiled("dqn", "Breakout", steps, 1, 1, width=512, **settings)
    idle = compiled("dqn", "Breakout", steps, 1, 1, learning_starts=10**9, width=512,
                    **settings)
    return {"update_in_loop_s": 4 * (1 / learn["env_steps_per_s"]
                                     - 1 / idle["env_steps_per_s"]),
            "env_steps_per_s": learn["env_steps_per_s"],
            "no_learning_env_steps_per_s": idle["env_steps_per_s"]}


def one_round(python: str, checkout: str) -> dict:
    """Every row once: CleanRL's two updates (its environment), PatchConv under the default
    and each of FLAGS (fresh processes), the sliced form in float32 and bf16 (this one)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([python, os.path.join(os.path.dirname(__file__), "cleanrl_peer.py"),
                        "update", "--checkout", checkout, "--out", f.name], check=True,
                       env=cleanrl_env.environ())
        with open(f.name) as g:
            peer = json.load(g)
    median = lambda seconds: float(np.median(seconds))  # noqa: E731
    row = {"pytorch": {"update": median(peer["pytorch"])},
           "flax_conv": {part: median(peer["flax"][part]) for part in ("top_level", "in_scan")},
           "patch_conv": under_flags("")}
    row.update({f"flags {flags}": under_flags(flags) for flags in FLAGS})
    row.update({torso: {part: v["median_s"] for part, v in time_update(torso).items()}
                for torso in ("slices", "slices_bf16")})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl", default=cleanrl_env.URL,
                        help="where to clone CleanRL from (a URL, or a local clone)")
    parser.add_argument("--cleanrl-root", default=cleanrl_env.ROOT,
                        help="where CleanRL's checkout and venv are kept")
    parser.add_argument("--steps", type=int, default=1024, help="env steps per loop run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, each timing every row once (medians over rounds)")
    parser.add_argument("--patch-only", action="store_true",
                        help="(internal) time patch_conv only, under this process's XLA_FLAGS")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    if args.patch_only:
        with open(args.out, "w") as f:
            json.dump({part: v["median_s"] for part, v in time_update("patch_conv").items()}, f)
        return
    python, checkout = cleanrl_env.ensure(args.cleanrl, args.cleanrl_root)
    rounds = [one_round(python, checkout) for _ in range(args.rounds)]
    names = rounds[0].keys()
    rows = {name: {part: float(np.median([r[name][part] for r in rounds]))
                   for part in rounds[0][name]} for name in names}
    ratios = [r["patch_conv"]["in_scan"] / r["pytorch"]["update"] for r in rounds]
    print(json.dumps(rows, indent=1), flush=True)
    loop = {"cleanrl_settings": agent_in_loop(CLEANRL_SETTINGS, args.steps),
            "own_settings": agent_in_loop({}, args.steps)}
    pytorch, bare = rows["pytorch"]["update"], rows["patch_conv"]["in_scan"]
    summary = {
        "pytorch_ms": 1e3 * pytorch,
        "flax_conv_top_level_ms": 1e3 * rows["flax_conv"]["top_level"],
        "flax_conv_in_scan_ms": 1e3 * rows["flax_conv"]["in_scan"],
        "patch_conv_top_level_ms": 1e3 * rows["patch_conv"]["top_level"],
        "patch_conv_in_scan_ms": 1e3 * bare,
        "ratio_patch_conv_in_scan_to_pytorch_median": float(np.median(ratios)),
        "ratio_patch_conv_in_scan_to_pytorch_range": [min(ratios), max(ratios)],
        "best_flags": min(FLAGS, key=lambda f: rows[f"flags {f}"]["in_scan"]),
        "slices_bf16_relative_error": bf16_error(),
        "agent_in_loop_cleanrl_settings_ms": 1e3 * loop["cleanrl_settings"]["update_in_loop_s"],
        "agent_in_loop_own_settings_ms": 1e3 * loop["own_settings"]["update_in_loop_s"],
        "ratio_agent_in_loop_cleanrl_settings_to_bare":
            loop["cleanrl_settings"]["update_in_loop_s"] / bare,
        "ratio_agent_in_loop_own_settings_to_bare":
            loop["own_settings"]["update_in_loop_s"] / bare}
    print(json.dumps(summary, indent=1), flush=True)
    result = {"batch": BATCH, "actions": ACTIONS, "hidden": 512, "repeats": REPEATS,
              "rounds": args.rounds, "device": str(jax.devices()[0]),
              "load_average": os.getloadavg(), "cleanrl_commit": cleanrl_env.COMMIT,
              "cleanrl_versions": cleanrl_env.versions(python), "rows": rows,
              "per_round": rounds, "agent_in_loop": loop, "summary": summary,
              "command": f"python benchmarks/atari_update.py --cleanrl {args.cleanrl} "
                         f"--steps {args.steps} --rounds {args.rounds}"}
    write_result(result, args.out)


if __name__ == "__main__":
    main()
