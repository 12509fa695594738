"""Train a value-based agent on DeepSea: one compiled ``lax.scan`` over env steps, ``vmap`` over
seeds and action mappings (PureJaxRL style), through :func:`hyperx.loop.run_scan`.

DeepSea (Osband et al., bsuite, ICLR 2020) episodes are exactly N steps, so episode ``e`` ends
at step ``(e + 1) N - 1`` for every seed at once: per-episode returns and bad-episode flags are
written into fixed ``(S, E)`` arrays inside the scan, with ``E = steps / N``. The replay stores
the compact state id ``row * N + column`` (an int32), never the N x N one-hot; the torso embeds
it (:class:`hyperx.heads.OneHotMLPTorso`). The run advances in chunks of ``chunk_steps`` steps;
between chunks a progress bar moves and, with ``checkpoint_dir``, the whole carry is saved with
orbax, so a run stopped anywhere (also mid-episode) resumes bit for bit.

Learned criteria reported per seed (:func:`hyperx.envs.deepsea.bsuite_learned_episode` and
:func:`~hyperx.envs.deepsea.running_mean_learned_episode`): bsuite's (first episode with
#bad / #episodes < 0.9), computed at EVERY episode, so it is the exact crossing (bsuite checks
only its log-spaced logged episodes); and the stricter first episode whose last-100 mean
return reaches 0.9 x 0.99.

Reproducibility: seed ``s`` uses ``fold_in(PRNGKey(seed), s)``, so its random draws do not
depend on how many seeds share the batch.

Sizes are checked before anything is allocated: the env-step budget ``N x episodes`` and the
state ids must fit the int32 counters, and the carry of all seeds (three times: the compiled
chunk's input, output and temporaries) the device's memory; ``ValueError`` gives the estimate.
The chunks run through :func:`hyperx.loop.run_chunks`: a Ctrl-C stops the run with
:class:`hyperx.loop.TrainingInterrupted` (a save in progress is completed first), which says how
far it got and which checkpoint to resume from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from hyperx._validation import (
    INT32_MAX,
    check_int,
    check_memory,
    device_memory_bytes,
    format_bytes,
    plural,
    tree_bytes,
)
from hyperx.agents.config import AgentConfig
from hyperx.agents.core import Agent, AgentState, Transition, make_agent
from hyperx.agents.keys import run_key, split_run_key, step_keys
from hyperx.envs import deepsea
from hyperx.loop import (
    Chunk,
    ScanProgram,
    run_chunks,
    run_scan,
    scan_program,
    shard_leading_axis,
    to_host,
)
from hyperx.loop import TrainingInterrupted as TrainingInterrupted  # its home before hyperx.loop

Array = jax.Array


DEEPSEA_STEP_BUDGETS: dict[int, int] = {
    10: 20_000, 20: 50_000, 30: 100_000, 40: 120_000, 50: 200_000, 60: 300_000,
    70: 350_000, 80: 500_000, 90: 900_000, 100: 1_000_000, 120: 1_500_000,
}
"""The published env-step budgets per DeepSea size (Li et al., HyperAgent, ICML 2024:
``epoch x 1000`` steps in the reference's ``experiments/deepsea/run_HyperAgent.sh``; N = 10 is
our choice)."""


def deepsea_step_budget(size: int) -> int:
    """Env steps per seed for DeepSea(``size``): the published budget (HyperAgent's
    ``run_HyperAgent.sh``; 20k at N = 10, our choice). Other sizes raise ``ValueError``."""
    check_int("size", size)
    if size not in DEEPSEA_STEP_BUDGETS:
        raise ValueError(f"size: expected one of {sorted(DEEPSEA_STEP_BUDGETS)} (the published "
                         f"budgets), got {size}")
    return DEEPSEA_STEP_BUDGETS[size]


class SeedCarry(NamedTuple):
    """One seed's training state (vmapped: every leaf has a leading seed axis)."""

    agent: AgentState
    env_state: deepsea.EnvState
    env_params: deepsea.EnvParams
    key: Array
    episode_return: Array
    returns: Array
    bad: Array


class TrainCarry(NamedTuple):
    """The carry of the scan: the step counter ``t`` (shared by all seeds) and the seeds."""

    t: Array
    seeds: SeedCarry


class DeepSeaResult(NamedTuple):
    """Outcome of :func:`train_deepsea`.

    returns, bad: (S, E) per-episode return and bad-episode flag.
    learned_bsuite: (S,) exact first episode (1-based) with #bad / #episodes < 0.9, or -1.
    learned_running_mean: (S,) first episode whose last-100 mean return >= 0.9 x 0.99, or -1.
    compile_time_s, wall_time_s: compile time and run time (this process, after compiling).
    env_steps_per_s: env steps per second summed over seeds (acting + learning).
    steps_done: env steps completed (per seed); less than the budget after ``max_chunks``.
    carry: the final :class:`TrainCarry`.
    steps_at_start: env steps already done when this call started (from a checkpoint); equal
      to ``steps_done`` when the checkpointed run was already complete.
    """

    returns: np.ndarray
    bad: np.ndarray
    learned_bsuite: np.ndarray
    learned_running_mean: np.ndarray
    compile_time_s: float
    wall_time_s: float
    env_steps_per_s: float
    steps_done: int
    carry: TrainCarry
    steps_at_start: int = 0


class DeepSeaProgram(NamedTuple):
    """A compiled-once training program: ``init(keys, mappings) -> TrainCarry`` (jitted), the
    batched ``step(carry, t)`` and its chunk of ``chunk`` steps (``scan``, for
    :func:`hyperx.loop.run_scan`). Hold it and pass it to :func:`train_deepsea` again to run
    more seeds or another base seed without compiling again."""

    config: AgentConfig
    agent: Agent
    size: int
    num_steps: int
    chunk: int
    init: Any
    step: Any
    scan: ScanProgram


def state_id(state: deepsea.EnvState, size: int) -> Array:
    """The compact observation ``row * N + column`` (int32); ``N * N`` and above are terminal."""
    return (state.row * size + state.column).astype(jnp.int32)


def make_program(config: AgentConfig, size: int, num_episodes: int,
                 chunk_steps: int | None = None) -> DeepSeaProgram:
    """The training program of ``config`` on DeepSea(size) for ``num_episodes`` episodes, in
    chunks of ``chunk_steps`` env steps (default: about 20 chunks per run; more than the
    run's steps is one chunk of the run's steps)."""
    check_int("size", size, high=int((INT32_MAX // 2) ** 0.5))
    check_int("num_episodes", num_episodes)
    num_steps = size * num_episodes
    if num_steps > INT32_MAX:
        raise ValueError(f"num_episodes: expected size x num_episodes <= {INT32_MAX} env steps "
                         f"(the int32 step counter), got {size} x {num_episodes} = {num_steps}")
    chunk = chunk_steps or max(size, -(-num_steps // 20))
    check_int("chunk_steps", chunk)
    agent = make_agent(config, 2, jnp.int32(0), num_states=size * size, step_budget=num_steps)

    def init_seed(key: Array, mapping: Array) -> SeedCarry:
        k_agent, k_run = split_run_key(key)
        params = deepsea.make_params(mapping)
        env_state, _ = deepsea.reset(params)
        zeros = jnp.zeros((num_episodes,), jnp.float32)
        return SeedCarry(agent.init(k_agent), env_state, params, k_run, jnp.float32(0.0),
                         zeros, zeros.astype(bool))

    def seed_step(c: SeedCarry, t: Array) -> SeedCarry:
        key, k_act, k_obs = step_keys(c.key)
        obs = state_id(c.env_state, size)
        action = agent.act(c.agent, k_act, obs)
        out = deepsea.step(c.env_params, c.env_state, action)
        transition = Transition(obs, action, out.reward, state_id(out.state, size), out.done,
                                jnp.bool_(False))
        agent_state = agent.observe(c.agent, k_obs, transition)
        episode_return = c.episode_return + out.reward
        episode = t // size
        returns = c.returns.at[episode].set(
            jnp.where(out.done, episode_return, c.returns[episode]))
        bad = c.bad.at[episode].set(jnp.where(out.done, out.info.bad_episode, c.bad[episode]))
        return SeedCarry(agent_state, deepsea.auto_reset(c.env_params, out.state),
                         c.env_params, key, jnp.where(out.done, 0.0, episode_return),
                         returns, bad)

    batched = jax.vmap(seed_step, in_axes=(0, None))

    def step(c: TrainCarry, _: Array) -> tuple[TrainCarry, None]:
        seeds = jax.lax.cond(c.t < num_steps, lambda s: batched(s, c.t), lambda s: s, c.seeds)
        return TrainCarry(c.t + 1, seeds), None

    def init(keys: Array, mappings: Array) -> TrainCarry:
        return TrainCarry(jnp.int32(0), jax.vmap(init_seed)(keys, mappings))

    return DeepSeaProgram(config, agent, size, num_steps, chunk, jax.jit(init), step,
                          scan_program(step, min(chunk, num_steps)))


def _mappings(size: int, num_seeds: int, mapping_seeds: int | Sequence[int]) -> np.ndarray:
    if isinstance(mapping_seeds, int | np.integer):
        return np.broadcast_to(deepsea.bsuite_mapping(size, int(mapping_seeds)),
                               (num_seeds, size, size))
    seeds = list(mapping_seeds)
    if len(seeds) != num_seeds:
        raise ValueError(f"mapping_seeds: expected an int or {plural(num_seeds, 'seed')} (one "
                         f"per seed), got {len(seeds)}")
    return np.stack([deepsea.bsuite_mapping(size, int(m)) for m in seeds])


def initial_carry(program: DeepSeaProgram, num_seeds: int, seed: int = 0,
                  mapping_seeds: int | Sequence[int] = deepsea.BSUITE_MAPPING_SEED
                  ) -> TrainCarry:
    """The carry at step 0: seed ``s`` keyed by ``fold_in(PRNGKey(seed), s)``."""
    check_int("num_seeds", num_seeds)
    check_carry_memory(program, num_seeds)
    keys = jax.vmap(lambda s: run_key(seed, s))(jnp.arange(num_seeds))
    return program.init(keys, jnp.asarray(_mappings(program.size, num_seeds, mapping_seeds)))


def check_carry_memory(program: DeepSeaProgram, num_seeds: int) -> None:
    """Raise ``ValueError`` with the estimate when ``num_seeds`` seeds' carry (three times:
    a chunk's input, output and temporaries, plus the action mappings) exceeds device memory."""
    n = program.size
    keys = jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32)
    mappings = jax.ShapeDtypeStruct((num_seeds, n, n), jnp.int32)
    carry = jax.eval_shape(program.init, keys, mappings)
    nbytes = tree_bytes(carry)
    check_memory(f"DeepSea({n}) with {plural(num_seeds, 'seed')} "
                 f"({format_bytes(nbytes / num_seeds)} per seed)",
                 3 * nbytes + 4 * num_seeds * n * n, device_memory_bytes(), "device memory")


def train_deepsea(
    config: AgentConfig, size: int, num_episodes: int, *, num_seeds: int = 1, seed: int = 0,
    mapping_seeds: int | Sequence[int] = deepsea.BSUITE_MAPPING_SEED,
    chunk_steps: int | None = None, checkpoint_dir: str | None = None,
    max_chunks: int | None = None, progress: bool = False,
    on_chunk: Callable[[Chunk], None] | None = None,
    devices: Sequence[Any] | None = None, program: DeepSeaProgram | None = None,
) -> DeepSeaResult:
    """Train ``config`` on DeepSea(size) for ``num_episodes`` episodes and ``num_seeds`` seeds.

    Args:
      config: agent configuration (:func:`hyperx.agents.get_config`).
      size: N; each episode is N env steps, so the budget is ``N * num_episodes`` steps.
      num_episodes: episodes per seed.
      num_seeds: seeds, vmapped in one compiled program.
      seed: base seed; seed s uses ``fold_in(PRNGKey(seed), s)``.
      mapping_seeds: bsuite mapping seed shared by all seeds (42, bsuite's sweep), or one
        mapping seed per seed.
      chunk_steps: env steps per compiled call (default: about 20 chunks per run; more than
        the run's steps is one chunk of the run's steps).
      checkpoint_dir: save the full carry after every chunk there and resume from its latest
        checkpoint (which must come from the same arguments).
      max_chunks: stop after this many chunks in this call (to split a run across processes).
      progress: show a tqdm progress bar between chunks (when tqdm is installed); it appears
        after the first chunk, so its rate and ETA leave out the compilation.
      on_chunk: called after each chunk (before its checkpoint) with a
        :class:`hyperx.loop.Chunk`: ``done`` env steps per seed, the carry (e.g. to write the
        episodes finished so far), no metrics.
      program: the :func:`make_program` of these arguments, held by the caller to run again
        without compiling again (default: built for this call).
      devices: spread the seeds over these devices (``num_seeds`` a multiple of their number)
        on a 1-D mesh ``"runs"`` (:func:`hyperx.loop.shard_leading_axis`); default:
        everything on the default device. Seed s is keyed as without devices (on CPU, four
        devices of two processes give the one-device numbers bit for bit:
        tests/test_distributed.py). On several hosts, call ``jax.distributed.initialize()`` in
        every process first and pass ``jax.devices()`` (all processes' devices): every
        process runs this call, the returned arrays are gathered onto every process
        (:func:`hyperx.loop.to_host`) and ``on_chunk`` gets the sharded carry (gather
        what it writes with ``to_host``, in every process). ``checkpoint_dir`` is refused
        there (the checkpoint's checksum reads the whole carry in one process).

    Raises :class:`hyperx.loop.TrainingInterrupted` on Ctrl-C (``done``: env steps per seed
    run; a chunk's hook and save are finished first).
    """
    check_int("num_seeds", num_seeds)
    if program is None:
        program = make_program(config, size, num_episodes, chunk_steps)
    elif ((program.config, program.size, program.num_steps) != (config, size, size * num_episodes)
          or chunk_steps not in (None, program.chunk)):
        raise ValueError(f"program: built for {program.config.name} on DeepSea({program.size}), "
                         f"{program.num_steps} env steps in chunks of {program.chunk}; this "
                         f"call asks for {config.name} on DeepSea({size}), "
                         f"{size * num_episodes} env steps in chunks of {chunk_steps}")
    devices = None if devices is None else list(devices)
    if devices is not None:
        check_int("devices", len(devices))
        if num_seeds % len(devices):
            raise ValueError(f"num_seeds: expected a multiple of the {len(devices)} devices, "
                             f"got {num_seeds}")
        if checkpoint_dir is not None and len({d.process_index for d in devices}) > 1:
            raise ValueError("checkpoint_dir: not supported with devices of several processes "
                             "(jax.distributed); drop checkpoint_dir or use one process's "
                             "devices")
    carry = initial_carry(program, num_seeds, seed, mapping_seeds)
    if devices is not None:
        carry = _place(carry, devices)
    manager = None
    resources = contextlib.ExitStack()
    with resources:  # closes the manager if the restore fails
        if checkpoint_dir is not None:
            from hyperx.checkpoint import CheckpointManager

            meta = checkpoint_metadata(program, num_seeds, seed, mapping_seeds)
            manager = resources.enter_context(contextlib.closing(
                CheckpointManager(checkpoint_dir, meta)))
            carry = manager.restore_latest(carry)
            if devices is not None:
                carry = _place(carry, devices)
        resources = resources.pop_all()  # from here on the driver closes it
    timing = {"compile": 0.0, "run": 0.0}

    def advance(c: TrainCarry) -> tuple[TrainCarry, dict]:
        result = run_scan(program.scan, c, program.scan.num_steps)
        timing["compile"] += result.compile_time_s
        timing["run"] += result.run_time_s
        return result.carry, {}

    run = run_chunks(
        advance, carry, position=lambda c: int(c.t), total=program.num_steps,
        max_chunks=max_chunks, on_chunk=on_chunk,
        save=None if manager is None else manager.save,
        saved_step=None if manager is None else manager.restored_step,
        progress="deepsea" if progress else None, unit="env step", cleanup=(resources.close,))
    carry, steps_before = run.carry, run.done_at_start
    compile_time, run_time = timing["compile"], timing["run"]
    steps_done = min(int(carry.t), program.num_steps)
    returns, bad = to_host((carry.seeds.returns, carry.seeds.bad))
    done = steps_done // size
    steps_run = (steps_done - steps_before) * num_seeds
    return DeepSeaResult(
        returns=returns[:, :done], bad=bad[:, :done],
        learned_bsuite=np.array([deepsea.bsuite_learned_episode(bad[s, :done])
                                 for s in range(num_seeds)], np.int64),
        learned_running_mean=np.array([deepsea.running_mean_learned_episode(returns[s, :done])
                                       for s in range(num_seeds)], np.int64),
        compile_time_s=compile_time, wall_time_s=run_time,
        env_steps_per_s=steps_run / run_time if run_time > 0 else float("nan"),
        steps_done=steps_done, carry=carry, steps_at_start=min(steps_before, program.num_steps))


def checkpoint_metadata(program: DeepSeaProgram, num_seeds: int, seed: int,
                        mapping_seeds: int | Sequence[int]) -> dict[str, Any]:
    """What :func:`train_deepsea`'s checkpoints record of their run; restoring one needs the
    same (:class:`hyperx.checkpoint.CheckpointManager` names the first difference)."""
    return {"agent": program.config.name, "config": repr(program.config), "size": program.size,
            "num_episodes": program.num_steps // program.size, "num_seeds": num_seeds,
            "seed": seed, "mapping_seeds": repr(mapping_seeds), "chunk_steps": program.chunk}


class SavedEvaluation(NamedTuple):
    """Outcome of :func:`evaluate_saved`.

    returns: (S, episodes) return of each greedy episode (0.99 = the treasure with all-right
    moves); treasure: (S, episodes) whether the episode reached the treasure (its +1 reward);
    env_step: env steps per seed of the restored checkpoint; protocol: the protocol in words.
    """

    returns: np.ndarray
    treasure: np.ndarray
    env_step: int
    protocol: str


def evaluate_saved(
    checkpoint_dir: str, config: AgentConfig, size: int, num_episodes: int, *,
    num_seeds: int = 1, seed: int = 0,
    mapping_seeds: int | Sequence[int] = deepsea.BSUITE_MAPPING_SEED,
    chunk_steps: int | None = None, episodes: int = 10,
) -> SavedEvaluation:
    """Greedy episodes of the newest intact checkpoint in ``checkpoint_dir``.

    ``checkpoint_dir`` is the checkpoints folder of a :func:`train_deepsea` run
    (``OUT/checkpoints`` of ``hyperx deepsea --checkpoint``); ``config``, ``size``,
    ``num_episodes``, ``num_seeds``, ``seed``, ``mapping_seeds`` and ``chunk_steps`` are that
    run's (the checkpoint records them; another value raises ``ValueError`` naming the first
    difference). Damaged steps are skipped with a warning
    (:func:`hyperx.checkpoint.restore_saved`); a folder with no intact checkpoint raises
    ``ValueError``.

    Protocol (ours; bsuite and the HyperAgent reference score DeepSea by the training
    episodes, :class:`DeepSeaResult`): each seed plays ``episodes`` episodes on its own
    action mapping (restored with the checkpoint), each greedy on a fresh index
    (``agent.eval_index``, ``agent.eval_act`` with epsilon 0; ties broken at random). DeepSea is
    deterministic given the mapping, so for an agent with one index (dqn) every episode of a
    seed is the same unless Q-values tie; for the hyper agents the episodes differ by index,
    and the fraction that reach the treasure measures how much of the posterior has found it.
    Seed ``s``'s keys come from ``fold_in(PRNGKey(seed + 1), s)`` (split per episode), so
    they do not depend on how many seeds share the batch.
    """
    from hyperx.checkpoint import restore_saved

    check_int("episodes", episodes)
    program = make_program(config, size, num_episodes, chunk_steps)
    like = jax.eval_shape(program.init, jax.ShapeDtypeStruct((num_seeds, 2), jnp.uint32),
                          jax.ShapeDtypeStruct((num_seeds, size, size), jnp.int32))
    carry = restore_saved(checkpoint_dir, checkpoint_metadata(program, num_seeds, seed,
                                                              mapping_seeds), like, "deepsea")
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(seed + 1), s))(
        jnp.arange(num_seeds))
    returns, treasure = jax.device_get(greedy_episodes(program, carry.seeds, keys, episodes))
    index = "" if config.index_dim == 1 else "a fresh index per episode, "
    protocol = (f"saved policy at env step {min(int(carry.t), program.num_steps)} per seed, "
                f"{index}greedy, {episodes} episodes per seed on the run's action mapping")
    return SavedEvaluation(np.asarray(returns), np.asarray(treasure),
                           min(int(carry.t), program.num_steps), protocol)


def greedy_episodes(program: DeepSeaProgram, seeds: SeedCarry, keys: Array, episodes: int
                    ) -> tuple[Array, Array]:
    """(S, episodes) returns and treasure flags of greedy episodes (:func:`evaluate_saved`'s
    protocol) of the seeds' agents on their mappings, seed s keyed by ``keys[s]``."""
    agent, n = program.agent, program.size

    def episode(state: AgentState, params: deepsea.EnvParams, key: Array
                ) -> tuple[Array, Array]:
        k_index, k_steps = jax.random.split(key)
        xi = agent.eval_index(k_index)

        def move(c: tuple, k: Array) -> tuple[tuple, None]:
            env, total, found = c
            action = agent.eval_act(state.params, state.prior, k, state_id(env, n), xi,
                                    epsilon=0.0)
            out = deepsea.step(params, env, action)
            return (out.state, total + out.reward, found | (out.reward > 0)), None

        start, _ = deepsea.reset(params)
        (_, total, found), _ = jax.lax.scan(move, (start, jnp.float32(0.0), jnp.bool_(False)),
                                            jax.random.split(k_steps, n))
        return total, found

    def seed_episodes(state: AgentState, params: deepsea.EnvParams, key: Array
                      ) -> tuple[Array, Array]:
        return jax.vmap(episode, in_axes=(None, None, 0))(
            state, params, jax.random.split(key, episodes))

    return jax.jit(jax.vmap(seed_episodes))(seeds.agent, seeds.env_params, keys)


def _place(carry: TrainCarry, devices: list[Any]) -> TrainCarry:
    """``carry`` with its seeds sharded over ``devices`` and its step counter replicated."""
    replicated = NamedSharding(Mesh(np.asarray(devices), ("runs",)), PartitionSpec())
    return TrainCarry(jax.device_put(carry.t, replicated),
                      shard_leading_axis(carry.seeds, devices))
