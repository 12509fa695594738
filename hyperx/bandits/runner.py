"""Run one (bandit environment, learner, config) for many seeds: one ``lax.scan``, one ``vmap``.

:func:`run_bandit` builds a bandit run on :func:`hyperx.loop.run_scan`: per round, the
environment draws the arm features, the learner acts, the environment draws the reward, the
learner updates and the expected regret max_k mu_k - mu_arm is accumulated. Seeds, and
hyper-parameter grid points of equal shapes, are flattened into one "run" axis that is vmapped
and, with several devices, sharded over a 1-D ``jax.sharding.Mesh`` (``NamedSharding(mesh,
P("runs"))``). On several hosts, call ``jax.distributed.initialize()`` in every process first
and pass ``jax.devices()``: every process runs the same call and gets the whole result back
(:func:`hyperx.loop.to_host`); two processes on CPU give the one-process numbers bit for bit
(tests/test_distributed.py, docs/distributed.md).

Reproducibility: seed ``s`` of a run keyed by ``seed`` always uses the key
``fold_in(PRNGKey(seed), s)`` (for every grid point: common random numbers), so its random draws
do not depend on how many seeds share the batch. Its numbers could still differ in the last bits
when the batch size changes, if XLA picked a different reduction order for a different batch
shape; on CPU, epsilon-greedy (ridge) on the Russo game gives bit-identical per-seed results
for 2 vs 5 seeds and for 1 vs 4 devices (tests/test_experiment.py checks both).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_int,
    check_memory,
    check_rank,
    device_memory_bytes,
    format_bytes,
    plural,
    tree_bytes,
)
from hyperx.bandits.base import BanditSpec, Learner, delayed
from hyperx.envs.bandits import BanditEnv
from hyperx.loop import (
    ScanProgram,
    log_grid,
    run_scan,
    scan_program,
    shard_leading_axis,
    to_host,
)

__all__ = ["BanditProgram", "BanditResult", "bandit_program", "check_run_memory", "run_bandit"]

Array = jax.Array

CACHE_BYTES = 4 << 20
"""Run state per compiled pass of :func:`run_bandit` with ``group_size="auto"`` (4 MiB: a
group's arm features stay in a typical last-level cache share)."""


class BanditResult(NamedTuple):
    """Cumulative expected regret of a bandit run.

    Attributes:
      t: (C,) round counts of the checkpoints.
      regret: (S, C) cumulative expected regret per seed at each checkpoint, or (G, S, C) with
        a grid of G hyper-parameter points.
      grid: the grid's values, name -> (G,) (empty without a grid).
      compile_time_s: time to compile the run.
      wall_time_s: time to run it (after compiling).
      steps_per_s: horizon / wall time: rounds per second at which every run advances.
      run_steps_per_s: rounds per second summed over seeds and grid points.
      group_size: runs per compiled pass (see ``run_bandit``'s ``group_size``).
    """

    t: np.ndarray
    regret: np.ndarray
    grid: dict[str, np.ndarray]
    compile_time_s: float
    wall_time_s: float
    steps_per_s: float
    run_steps_per_s: float
    group_size: int

    @property
    def final_regret(self) -> np.ndarray:
        """Cumulative expected regret after the last checkpoint, (S,) or (G, S)."""
        return self.regret[..., -1]

    def to_records(self) -> list[dict[str, Any]]:
        """A tidy table, one dict per (grid point, seed, checkpoint): ready for pandas."""
        regret = self.regret if self.grid else self.regret[None]
        rows = []
        for g, s, c in np.ndindex(regret.shape):
            point = {name: values[g].item() for name, values in self.grid.items()}
            rows.append({**point, "seed": s, "t": int(self.t[c]),
                         "regret": float(regret[g, s, c])})
        return rows


def _seed_keys(seed: int, num_seeds: int, first_seed: int) -> Array:
    """(num_seeds, 2) keys of seeds ``first_seed ..``: seed s gets ``fold_in(PRNGKey(seed), s)``,
    whatever the number of seeds (the seed key of :func:`hyperx.agents.keys.run_key`; the run
    then splits it as that module's docstring says)."""
    base = jax.random.PRNGKey(seed)
    return jax.vmap(lambda s: jax.random.fold_in(base, s))(first_seed + jnp.arange(num_seeds))


class _RunCarry(NamedTuple):
    env_state: Any
    learner_state: Any
    key: Array
    cum_regret: Array
    record: Array
    hparams: dict[str, Array]


def _check_grid(grid: Mapping[str, Any]) -> dict[str, np.ndarray]:
    values = {name: np.asarray(v) for name, v in grid.items()}
    sizes = {v.shape[0] if v.ndim == 1 else -1 for v in values.values()}
    if not values or len(sizes) != 1 or min(sizes) < 1:
        shapes = {name: v.shape for name, v in values.items()}
        raise ValueError(f"grid: expected 1-D arrays of one common length G >= 1, got {shapes}")
    return values


class BanditProgram(NamedTuple):
    """The compiled pieces of :func:`run_bandit` for one (env, learner, horizon, update
    period, recorded rounds, grid or not, chunk size): the jitted batched ``init_runs`` and the
    batched step's :class:`hyperx.loop.ScanProgram`. Build it with :func:`bandit_program` and
    pass it to ``run_bandit(program=...)`` to run more seeds (a sweep's parts) without
    compiling again; nothing is cached in this module."""

    env: BanditEnv
    learner: Learner | Callable[..., Learner]
    settings: tuple
    init_runs: Callable
    scan: ScanProgram


def bandit_program(
    env: BanditEnv, learner: Learner | Callable[..., Learner], *, horizon: int,
    update_every: int = 1, checkpoints: Any = None, grid: bool = False,
    chunk_size: int | None = None,
) -> BanditProgram:
    """The program :func:`run_bandit` runs for these arguments (``grid``: whether ``learner``
    is a factory called with a grid point); arguments are checked there."""
    t_record = log_grid(horizon) if checkpoints is None else np.asarray(checkpoints)
    init_runs, step = _bandit_functions(env, learner, horizon, update_every,
                                        tuple(np.asarray(t_record).tolist()), grid)
    return BanditProgram(env, learner, _settings(horizon, update_every, t_record, grid,
                                                 chunk_size),
                         init_runs, scan_program(step, horizon, chunk_size))


def _settings(horizon: int, update_every: int, t_record: Any, grid: bool,
              chunk_size: int | None) -> tuple:
    """What, besides the env and learner, a :class:`BanditProgram` is built for."""
    return (horizon, update_every, tuple(np.asarray(t_record).tolist()), bool(grid),
            min(chunk_size or horizon, horizon))


def _bandit_functions(
    env: BanditEnv, learner: Learner | Callable[..., Learner], horizon: int, update_every: int,
    t_record: tuple[int, ...], has_grid: bool,
) -> tuple[Callable, Callable]:
    """Jitted batched init and the batched step."""
    t_dev = jnp.asarray(t_record, jnp.int32)
    spec = BanditSpec.from_env(env, horizon)

    def make(hparams: dict[str, Array]) -> Learner:
        made = learner(**hparams) if has_grid else learner
        return delayed(made, update_every) if update_every > 1 else made

    def init_run(key: Array, hparams: dict[str, Array]) -> _RunCarry:
        k_env, k_learner, k_run = jax.random.split(key, 3)
        env_state = env.init(k_env)
        run_spec = spec
        if env.fixed_arms:
            run_spec = spec._replace(arms=env.observe(env_state, k_env, jnp.int32(0)).contexts)
        return _RunCarry(env_state, make(hparams).init(k_learner, run_spec), k_run,
                         jnp.zeros((), jnp.float32), jnp.zeros(t_dev.shape, jnp.float32),
                         hparams)

    def step_run(c: _RunCarry, t: Array) -> _RunCarry:
        agent = make(c.hparams)
        key, k_obs, k_act, k_rew, k_upd = jax.random.split(c.key, 5)
        round_ = env.observe(c.env_state, k_obs, t)
        arm = agent.act(c.learner_state, k_act, round_.contexts)
        reward = env.reward(c.env_state, k_rew, round_, arm)
        learner_state = agent.update(c.learner_state, k_upd, round_.contexts[arm], arm, reward)
        means = round_.expected_rewards
        cum = c.cum_regret + (jnp.max(means) - means[arm])
        record = jnp.where(t_dev == t + 1, cum, c.record)
        return c._replace(learner_state=learner_state, key=key, cum_regret=cum, record=record)

    return (jax.jit(jax.vmap(init_run)),
            lambda c, t: (jax.vmap(step_run, in_axes=(0, None))(c, t), None))


def run_bandit(
    env: BanditEnv, learner: Learner | Callable[..., Learner], *, horizon: int,
    num_seeds: int = 1, seed: int = 0, grid: Mapping[str, Any] | None = None,
    update_every: int = 1, checkpoints: Any = None, chunk_size: int | None = None,
    progress: Callable[[int, int], None] | None = None, devices: list[Any] | None = None,
    group_size: int | str | None = "auto", first_seed: int = 0,
    program: BanditProgram | None = None,
) -> BanditResult:
    """Cumulative expected regret of ``learner`` on ``env`` for ``num_seeds`` seeds.

    Args:
      env: the environment.
      learner: a Learner; or, with ``grid``, a factory called as ``learner(**point)`` with
        traced scalars for each grid point (the points must give equal shapes).
      horizon: rounds T.
      num_seeds: seeds per grid point; seed s uses ``fold_in(PRNGKey(seed), s)``.
      first_seed: run seeds ``first_seed .. first_seed + num_seeds - 1`` (to split one run's
        seeds over several calls: the results equal those of one call).
      grid: hyper-parameter name -> (G,) values, vmapped with the seeds.
      update_every: B > 1 gives batched / delayed feedback (``hyperx.bandits.base.delayed``).
      checkpoints: increasing round counts in [1, T] to record (default ``log_grid(T)``).
      chunk_size, progress: see :func:`run_scan`.
      program: the :func:`bandit_program` of these arguments, held by the caller to run more
        seeds without compiling again (default: built for this call).
      devices: devices to shard the runs over (default: all, which after
        ``jax.distributed.initialize()`` are every process's); runs are padded to a multiple.
      group_size: runs per compiled pass: an int, ``None`` (all runs in one pass) or
        ``"auto"`` (the default: as many runs as fit in :data:`CACHE_BYTES` of run state, at
        least one). The runs are split into groups of this size (rounded up to a multiple of
        the device count) that run the whole horizon one after another through the same
        compiled program. A group whose state (e.g. each seed's K x d arm features) fits in
        cache reads it from cache every round instead of streaming every seed's from memory:
        with large K d this is about twice as fast (benchmarks/bandit_throughput.py). Results
        do not depend on it (up to XLA's reduction order for a different batch shape, see the
        module docstring).

    Before anything is allocated, the runs' keys and regret records (``num_seeds`` x grid
    points x (8 + 12 C) bytes) and the run state of one compiled pass (three times the state of
    its runs: the compiled chunk's input, output and the update's temporaries) are checked
    against the device's memory, and ``horizon`` against the int32 range of the step counter;
    ``ValueError`` gives the estimate.
    """
    check_int("horizon", horizon)
    check_int("num_seeds", num_seeds)
    check_int("first_seed", first_seed, low=0)
    check_int("update_every", update_every)
    if 1 < update_every >= horizon:
        raise ValueError(f"update_every: expected < horizon = {horizon} (the learner would never "
                         f"use a batch of {update_every} rounds), got {update_every}")
    if grid is None:
        if not isinstance(learner, Learner):
            raise TypeError("learner: expected a Learner (a factory needs a grid)")
        grid_values: dict[str, np.ndarray] = {}
        num_points = 1
    else:
        if isinstance(learner, Learner) or not callable(learner):
            raise TypeError("learner: expected a factory learner(**point) -> Learner with grid")
        grid_values = _check_grid(grid)
        num_points = next(iter(grid_values.values())).shape[0]
    t_record = log_grid(horizon) if checkpoints is None else np.asarray(checkpoints)
    check_rank("checkpoints", t_record, 1)
    if (t_record.size == 0 or t_record[0] < 1 or t_record[-1] > horizon
            or np.any(np.diff(t_record) <= 0)):
        raise ValueError(f"checkpoints: expected increasing round counts in [1, {horizon}], "
                         f"got {t_record}")
    settings = _settings(horizon, update_every, t_record, bool(grid_values), chunk_size)
    if program is None:
        program = bandit_program(env, learner, horizon=horizon, update_every=update_every,
                                 checkpoints=t_record, grid=bool(grid_values),
                                 chunk_size=chunk_size)
    elif program.env is not env or program.learner is not learner or program.settings != settings:
        raise ValueError("program: built for another env, learner or settings (horizon, "
                         f"update_every, checkpoints, grid, chunk): {program.settings[:2]} ..., "
                         f"this call has {settings[:2]} ...; build it with bandit_program() "
                         "from this call's arguments")
    init_runs = program.init_runs

    devices = jax.devices() if devices is None else list(devices)
    num_runs = num_points * num_seeds
    # every run's key and hyper-parameters (built for all runs at once) and its float32 regret
    # record (on the device, gathered on the host, and the result's copy)
    check_memory(f"num_seeds = {num_seeds}" + (f" x {num_points} grid points" if grid else ""),
                 num_runs * (8 + 4 * len(grid_values) + 12 * t_record.size),
                 device_memory_bytes(), f"memory for the keys and regret records of "
                 f"{plural(num_runs, 'run', fmt=',')}")
    seed_keys = _seed_keys(seed, num_seeds, first_seed)
    all_keys = jnp.tile(seed_keys, (num_points, 1))
    all_hparams = {name: jnp.repeat(jnp.asarray(v), num_seeds) for name, v in grid_values.items()}
    run_bytes = tree_bytes(jax.eval_shape(init_runs, all_keys[:1],
                                          {k: v[:1] for k, v in all_hparams.items()}))
    if group_size == "auto":
        group = max(1, CACHE_BYTES // max(run_bytes, 1))
    elif group_size is None:
        group = num_runs
    elif isinstance(group_size, int) and not isinstance(group_size, bool) and group_size > 0:
        group = group_size
    else:
        raise ValueError(f"group_size: expected a positive int, None or 'auto', got "
                         f"{group_size!r}")
    group = math.ceil(min(group, num_runs) / len(devices)) * len(devices)
    check_memory(f"run state ({format_bytes(run_bytes)} per run, {plural(group, 'run')} per pass)",
                 3 * group * run_bytes,
                 device_memory_bytes() * len(devices), "device memory")
    num_groups = math.ceil(num_runs / group)
    pad = np.concatenate([np.arange(num_runs),
                          np.zeros(num_groups * group - num_runs, np.int64)])
    keys = all_keys[pad]
    hparams = {name: v[pad] for name, v in all_hparams.items()}

    records, compile_time, wall = [], 0.0, 0.0
    for g in range(num_groups):
        part = slice(g * group, (g + 1) * group)
        group_progress = None if progress is None else functools.partial(
            _group_progress, progress, g, num_groups, horizon)
        carry = init_runs(*shard_leading_axis((keys[part], {k: v[part] for k, v in
                                                            hparams.items()}), devices))
        result = run_scan(program.scan, carry, horizon, chunk_size=chunk_size,
                          progress=group_progress)
        records.append(to_host(result.carry.record))
        compile_time += result.compile_time_s
        wall += result.run_time_s
    regret = np.concatenate(records)[:num_runs].reshape(num_points, num_seeds, -1)
    return BanditResult(
        t=t_record, regret=regret if grid_values else regret[0], grid=grid_values,
        compile_time_s=compile_time, wall_time_s=wall,
        steps_per_s=horizon / wall, run_steps_per_s=horizon * num_runs / wall,
        group_size=group,
    )


def check_run_memory(env: BanditEnv, learner: Learner, horizon: int,
                     update_every: int = 1) -> None:
    """Raise ``ValueError`` with the estimate when ONE run of ``learner`` on ``env`` cannot
    fit in device memory (three times its state, as in :func:`run_bandit`), from shapes only:
    a command checks this before any work; ``run_bandit`` then sizes its groups."""
    init_runs, _ = _bandit_functions(env, learner, horizon, update_every, (horizon,), False)
    run_bytes = tree_bytes(jax.eval_shape(init_runs, jax.ShapeDtypeStruct((1, 2), jnp.uint32),
                                          {}))
    check_memory(f"run state ({format_bytes(run_bytes)} per run)", 3 * run_bytes,
                 device_memory_bytes(), "device memory")


def _group_progress(progress: Callable[[int, int], None], group: int, num_groups: int,
                    horizon: int, done: int, total: int) -> None:
    """Report group ``group``'s ``done`` of ``total`` steps as progress over all groups."""
    del total
    progress(group * horizon + done, num_groups * horizon)
