"""DeepSea training throughput: this checkout against a baseline commit, and where a step goes.

Full training (acting + one gradient step per env step) of HyperAgent on DeepSea(N), measured
for two designs on the same machine in the same run: the baseline commit (default 286e47c, the
code before the faster index draws and head gradient), checked out as a git worktree under
/tmp, and this checkout. Each design runs in its own Python process, one after the other with
the same settings (``PYTHONPATH`` picks the package), and measures:

* scan: :func:`hyperx.agents.deepsea.train_deepsea`, the whole run one ``lax.scan`` with
  1, 8 and 64 seeds vmapped (env steps per second summed over seeds, after compilation);
* loop: a Python loop calling the SAME jitted ``agent.act`` and ``agent.observe`` and a
  jitted env step once per step, ``block_until_ready`` each step, one seed;
* profile: one training step at ``--profile-seeds`` seeds cut into pieces (acting, replay
  add, replay sample, the loss and target index draws, the target forward pass, the loss
  forward + backward, the optimiser, the target sync, the whole gradient step), each piece
  its own jit over the vmapped seeds, timed after compilation as the median of ``--reps``
  calls with ``block_until_ready``; fractions are of the full step. The pieces rebuild the
  learner's steps from the public API (as :func:`hyperx.agents.core._make_learner` composes
  them), so they time what each design's index distribution, network and replay do.

Writes benchmarks/results/deepsea_throughput.json: both designs' rows and profiles, the ratio
new / baseline per seed count, and (for the README) this checkout's ``rows`` and
``scan_over_loop``. Full run: about 4-6 minutes on 2 quiet CPU cores. ``--quick`` is a tiny
check (200 steps, 1 and 2 seeds, written to /tmp unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "benchmarks", "results", "deepsea_throughput.json")
QUICK_OUT = os.path.join(tempfile.gettempdir(), "deepsea_throughput_quick.json")
BASELINE = "286e47c"


def scan_throughput(agent: str, size: int, steps: int, seeds: int) -> dict:
    """Env steps/s of the compiled scan with ``seeds`` vmapped seeds."""
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import train_deepsea

    result = train_deepsea(get_config(agent), size, max(steps // size, 1), num_seeds=seeds,
                           chunk_steps=steps)
    return {"driver": "scan", "seeds": seeds, "env_steps": result.steps_done * seeds,
            "compile_time_s": result.compile_time_s, "run_time_s": result.wall_time_s,
            "env_steps_per_s": result.env_steps_per_s}


def loop_throughput(agent: str, size: int, steps: int) -> dict:
    """Env steps/s of a Python loop over the jitted act / observe / env step (one seed)."""
    import jax
    import jax.numpy as jnp

    from hyperx.agents import Transition, get_config
    from hyperx.agents.deepsea import make_program, state_id
    from hyperx.envs import deepsea

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


def _median_time(fn, args: tuple, reps: int, donated: bool = False) -> float:
    """Median seconds of ``fn(*args)`` over ``reps`` calls after one compiling call; with
    ``donated``, ``fn`` returns the new first argument (its buffers are donated)."""
    import jax

    args = list(args)
    times = []
    for i in range(reps + 1):
        start = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        if i:
            times.append(time.perf_counter() - start)
        if donated:
            args[0] = out
    return float(np.median(times))


def profile_step(agent: str, size: int, steps: int, seeds: int, reps: int) -> dict:
    """Seconds per call of the pieces of one training step with ``seeds`` vmapped seeds.

    The buffer is filled past ``learning_starts`` first, so every step learns. ``step`` is
    the whole training step (act, env, store, gradient step); ``update`` the whole gradient
    step; the other pieces are its parts.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from hyperx.agents import get_config
    from hyperx.agents.deepsea import initial_carry, make_program
    from hyperx.index import make_index
    from hyperx.loop import run_scan
    from hyperx.losses import double_q_targets, perturbed_value_loss
    from hyperx.replay import make_replay_buffer

    config = get_config(agent)
    if config.update_index != "sample" or config.target_index != "fresh" or config.sigma > 0 \
            or config.beta > 0 or config.l2 > 0 or config.ois_quantile is not None:
        raise ValueError(f"agent: the profile rebuilds the plain HyperAgent loss (sampled "
                         f"indices, a fresh target index, no perturbation or regulariser), "
                         f"got {config}")
    program = make_program(config, size, max(steps // size, 1))
    warm = config.learning_starts + 2
    carry = run_scan(program.step, initial_carry(program, seeds), warm).carry
    agent_ = program.agent
    net, states = agent_.network, carry.seeds.agent
    batch_size, num_k = config.batch_size, config.num_indices
    index = make_index(config.index, config.index_dim)
    sphere = make_index("sphere", config.index_dim)
    buffer = make_replay_buffer(config.n_step, config.gamma)
    optimiser = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm) if config.max_grad_norm
        else optax.identity(),
        optax.adam(config.learning_rate, eps=config.adam_eps))
    keys = jax.random.split(jax.random.PRNGKey(1), seeds)
    obs = jnp.zeros((seeds,), jnp.int32)
    vmap = jax.vmap

    def sample(s, k):
        return buffer.sample(s.replay, k, batch_size)

    def store(replay, k):
        stored = dict(obs=jnp.int32(1), action=jnp.int32(1), reward=jnp.float32(0.0),
                      next_obs=jnp.int32(size + 1), terminal=jnp.bool_(False),
                      truncated=jnp.bool_(False), z=sphere.sample(k))
        return buffer.add(replay, stored)

    def targets(s, batch, xi_target):
        q_target = net.apply({"params": s.target_params, "prior": s.prior},
                             batch.bootstrap_obs, xi_target)
        q_online = (net.apply({"params": s.params, "prior": s.prior}, batch.bootstrap_obs,
                              xi_target) if config.double_q else None)
        return double_q_targets(batch.n_step_return, batch.discount, q_target, q_online)

    def loss_grad(s, batch, xi, y):
        def loss_fn(params):
            q = net.apply({"params": params, "prior": s.prior}, batch.transition["obs"], xi)
            return perturbed_value_loss(q, batch.transition["action"], y, mask=batch.valid)

        return jax.value_and_grad(loss_fn)(s.params)

    def optimise(s, grads):
        updates, opt_state = optimiser.update(grads, s.opt_state, s.params)
        return optax.apply_updates(s.params, updates), opt_state

    def sync(s, params):
        due = (s.grad_steps + 1) % config.target_update_period == 0
        return jax.tree.map(lambda p, t: jnp.where(due, p, t), params, s.target_params)

    def update(s, k):
        new = agent_.update(s, k)
        return new.params, new.target_params, new.opt_state, new.grad_steps, new.loss

    batch = jax.jit(vmap(sample))(states, keys)
    xi = jax.jit(vmap(lambda k: index.sample(k, (batch_size, num_k))))(keys)
    xi_target = jax.jit(vmap(lambda k: index.sample(k, (batch_size, 1))))(keys)
    y = jax.jit(vmap(targets))(states, batch, xi_target)
    _, grads = jax.jit(vmap(loss_grad))(states, batch, xi, y)
    params, _ = jax.jit(vmap(optimise))(states, grads)
    step = jax.jit(lambda c: program.step(c, jnp.int32(0))[0], donate_argnums=0)
    pieces = {
        "act": (jax.jit(vmap(agent_.act)), (states, keys, obs), False),
        "replay_add": (jax.jit(vmap(store), donate_argnums=0),
                       (jax.tree.map(jnp.copy, states.replay), keys), True),
        "replay_sample": (jax.jit(vmap(sample)), (states, keys), False),
        "loss_indices": (jax.jit(vmap(lambda k: index.sample(k, (batch_size, num_k)))),
                         (keys,), False),
        "target_indices": (jax.jit(vmap(lambda k: index.sample(k, (batch_size, 1)))),
                           (keys,), False),
        "target_forward": (jax.jit(vmap(targets)), (states, batch, xi_target), False),
        "loss_forward_backward": (jax.jit(vmap(loss_grad)), (states, batch, xi, y), False),
        "optimiser": (jax.jit(vmap(optimise)), (states, grads), False),
        "target_sync": (jax.jit(vmap(sync)), (states, params), False),
        "update": (jax.jit(vmap(update)), (states, keys), False),
    }
    seconds = {"step": _median_time(step, (jax.tree.map(jnp.copy, carry),), reps, True)}
    for name, (fn, args, donated) in pieces.items():
        seconds[name] = _median_time(fn, args, reps, donated)
    parts = [n for n in pieces if n != "update"]
    return {"seeds": seeds, "reps": reps, "seconds": seconds,
            "fraction_of_step": {n: seconds[n] / seconds["step"] for n in seconds},
            "parts_sum_over_step": sum(seconds[n] for n in parts) / seconds["step"]}


def generator_options(seeds: int, batch_size: int, num_k: int, dim: int, reps: int) -> dict:
    """Seconds to draw the loss indices' ``seeds x batch_size x num_k x dim`` normals (vmapped
    over seeds) with jax.random's generators and with :func:`hyperx.threefry.normal`.

    ``rbg`` / ``unsafe_rbg`` are timed but not used: under ``vmap`` XLA's RngBitGenerator
    draws every seed's bits from the FIRST seed's key (JAX's batching rule), so a seed's
    numbers would depend on its batch.
    """
    import jax

    shape = (batch_size, num_k, dim)

    def timed(make_keys, draw) -> float:
        keys = make_keys()
        return _median_time(jax.jit(jax.vmap(lambda k: draw(k, shape))), (keys,), reps)

    out = {}
    legacy = lambda: jax.random.split(jax.random.PRNGKey(0), seeds)  # noqa: E731
    out["jax.random.normal threefry (partitionable)"] = timed(legacy, jax.random.normal)
    jax.config.update("jax_threefry_partitionable", False)
    try:
        out["jax.random.normal threefry (not partitionable)"] = timed(legacy, jax.random.normal)
    finally:
        jax.config.update("jax_threefry_partitionable", True)
    for impl in ("rbg", "unsafe_rbg"):
        typed = lambda impl=impl: jax.random.split(jax.random.key(0, impl=impl), seeds)  # noqa: E731
        out[f"jax.random.normal {impl}"] = timed(typed, jax.random.normal)
    import hyperx

    if os.path.exists(os.path.join(os.path.dirname(hyperx.__file__), "threefry.py")):
        from hyperx import threefry

        out["hyperx.threefry.normal (bit-identical to threefry partitionable)"] = timed(
            legacy, threefry.normal)
    return out


def worker(args: argparse.Namespace) -> dict:
    """Everything one design measures, in this process (``PYTHONPATH`` chose the package)."""
    import jax

    import hyperx

    rows = [loop_throughput(args.agent, args.size, args.steps)]
    print(rows[-1], flush=True)
    for seeds in args.seeds:
        rows.append(scan_throughput(args.agent, args.size, args.steps, seeds))
        print(rows[-1], flush=True)
    profile = profile_step(args.agent, args.size, args.steps, args.profile_seeds, args.reps)
    print(json.dumps(profile["fraction_of_step"], indent=1), flush=True)
    from hyperx.agents import get_config

    config = get_config(args.agent)
    generators = generator_options(args.profile_seeds, config.batch_size, config.num_indices,
                                   config.index_dim, args.reps)
    package = os.path.dirname(hyperx.__file__)
    foreign = sorted(name for name, module in sys.modules.items()
                     if name.startswith("hyperx.") and getattr(module, "__file__", None)
                     and not os.path.realpath(module.__file__).startswith(
                         os.path.realpath(package) + os.sep))
    if foreign:  # an editable install can resolve a module the tree lacks from elsewhere
        raise RuntimeError(f"modules imported from outside {package}: {foreign}")
    return {"hyperx": package, "jax": jax.__version__,
            "device": str(jax.devices()[0]), "rows": rows, "profile": profile,
            "loss_index_generators_s": generators}


def baseline_tree(commit: str) -> str:
    """A git worktree of ``commit`` under the temp dir (made on first use)."""
    path = os.path.join(tempfile.gettempdir(), f"hyperx_{commit}")
    if not os.path.isdir(path):
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", path, commit],
                       check=True)
    head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    want = subprocess.run(["git", "-C", ROOT, "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    if head != want:
        raise RuntimeError(f"{path} is at {head}, expected {commit} = {want}; remove it "
                           "(git worktree remove) and rerun")
    return path


def run_design(tree: str, args: argparse.Namespace) -> dict:
    """Run :func:`worker` in a fresh process with ``PYTHONPATH=tree``."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-out", out,
           "--agent", args.agent, "--size", str(args.size), "--steps", str(args.steps),
           "--seeds", *map(str, args.seeds), "--profile-seeds", str(args.profile_seeds),
           "--reps", str(args.reps)]
    env = dict(os.environ, PYTHONPATH=tree)
    print(f"== {tree}", flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=tree)
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    if os.path.realpath(result["hyperx"]) != os.path.realpath(os.path.join(tree, "hyperx")):
        raise RuntimeError(f"the worker imported {result['hyperx']}, not {tree}/hyperx")
    return result


def _commit(tree: str) -> str:
    head = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
                           check=True, capture_output=True, text=True).stdout.strip()
    return head + ("+uncommitted" if dirty else "")


def _throughput(result: dict) -> dict[str, float]:
    return {("python_loop" if r["driver"] == "python_loop" else str(r["seeds"])):
            r["env_steps_per_s"] for r in result["rows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="hyperagent")
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3000, help="env steps per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--profile-seeds", type=int, default=64)
    parser.add_argument("--reps", type=int, default=7, help="timed calls per profiled piece")
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against")
    parser.add_argument("--quick", action="store_true",
                        help="tiny check: 200 steps, 1 and 2 seeds, written to /tmp")
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.seeds, args.profile_seeds, args.reps = 200, [1, 2], 2, 2
    if args.worker_out is not None:
        with open(args.worker_out, "w") as f:
            json.dump(worker(args), f)
        return
    out = args.out or (QUICK_OUT if args.quick else OUT)
    old = run_design(baseline_tree(args.baseline), args)
    new = run_design(ROOT, args)
    old_rate, new_rate = _throughput(old), _throughput(new)
    loop = new_rate["python_loop"]
    result = {
        "agent": args.agent, "size": args.size, "steps_per_seed": args.steps,
        "device": new["device"], "cpu_count": os.cpu_count(), "jax": new["jax"],
        "rows": new["rows"],
        "scan_over_loop": {k: v / loop for k, v in new_rate.items() if k != "python_loop"},
        "new_over_baseline": {k: new_rate[k] / old_rate[k] for k in new_rate},
        "designs": {"baseline": {"commit": args.baseline, **old},
                    "new": {"commit": _commit(ROOT), **new}},
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({"new_over_baseline": result["new_over_baseline"],
                      "scan_over_loop": result["scan_over_loop"]}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
