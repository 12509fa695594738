"""The loop every trainer runs: compiled ``lax.scan`` chunks, and ONE host driver around them.

:func:`run_scan` compiles ``lax.scan(step_fn)`` over ``num_steps`` steps, in chunks of
``chunk_size`` so a progress callback (or logging, checkpoints) can run between compiled
chunks. The chunk function (:func:`scan_program`) is compiled once; a final partial chunk is
padded with skipped steps (the step is wrapped in ``lax.cond(t < num_steps, ...)``), so nothing
else is recompiled. A caller that runs the same scan again holds its :class:`ScanProgram` and
passes it back: programs are returned to callers, never cached in module globals. Any
loop whose state is a pytree uses it: the bandit runs (:func:`hyperx.bandits.runner.run_bandit`),
the DeepSea and Atari trainers (:mod:`hyperx.agents.deepsea`, :mod:`hyperx.agents.atari`).

:func:`run_chunks` is the host side every trainer shares (DeepSea, Atari, the bandit sweep's
parts, ``hyperx llm``): it advances a carry one chunk at a time, hands each chunk to ONE hook
(``on_chunk(Chunk)``), saves a checkpoint, stops after ``max_chunks``, turns Ctrl-C into
:class:`TrainingInterrupted` once the chunk's outputs and save are complete, and runs the
trainer's clean-up in ``finally`` on every exit. A trainer supplies only what is its own: how
to advance one chunk and where the run stands.

Beside them: :func:`shard_leading_axis` places a batch of runs over the devices of a 1-D mesh
``"runs"``, :func:`to_host` gathers a (possibly multi-process) result to host NumPy, and
:func:`log_grid` gives the log-spaced steps at which a long run records.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from hyperx._host import device_line, sigint_held
from hyperx._validation import check_int, check_memory, check_positive, host_memory_bytes, plural

__all__ = ["Chunk", "ChunkedRun", "ScanProgram", "ScanResult", "TrainingInterrupted", "log_grid",
           "run_chunks", "run_scan", "scan_program", "shard_leading_axis", "to_host"]

Array = jax.Array
Carry = Any


class ScanResult(NamedTuple):
    """Final carry, stacked per-step outputs (host NumPy gathered from every process, leading
    axis ``num_steps``), timings."""

    carry: Carry
    outputs: Any
    compile_time_s: float
    run_time_s: float


class ScanProgram(NamedTuple):
    """``lax.scan`` of a step over ``num_steps`` steps in chunks of ``chunk``, jitted once
    (:func:`scan_program`). The caller holds it and passes it to :func:`run_scan` as often as
    it likes: its compiled chunk lives as long as the caller keeps the program (nothing is
    cached in this module)."""

    run_chunk: Callable[[Carry, Array], tuple[Carry, Any]]
    num_steps: int
    chunk: int


COPY_INSERTION = {"xla_cpu_copy_insertion_use_region_analysis": True}
"""XLA:CPU copy insertion with region analysis (off by default in XLA:CPU)."""


def compiler_options() -> dict[str, bool]:
    """The XLA options hyperx compiles its loops with: :data:`COPY_INSERTION` on the CPU
    backend, nothing elsewhere.

    Without region analysis XLA:CPU copies the operands a ``lax.cond`` branch returns unchanged:
    an agent's no-learn branch copied the parameters and Adam moments on every env step that
    did not learn (3 copies of the Nature CNN's 3136 x 512 weights; a DQN Breakout step that
    did not learn cost 1.25-1.30 ms with the option against 2.80-2.89 ms without,
    ``benchmarks/copy_insertion.py`` at commit e12fb91, before the lockstep update of commit
    dbb9299, after which that branch copies nothing either way; ``tests/agents/test_atari.py``
    reads the optimised HLO), and a skipped padding step copied the whole carry, replay
    included. The option changes buffer assignment only, so results are bit-identical.
    """
    return dict(COPY_INSERTION) if jax.default_backend() == "cpu" else {}


def _chunk(num_steps: int, chunk_size: int | None) -> int:
    """The steps of one compiled chunk (``chunk_size``, at most ``num_steps``; default all)."""
    check_int("num_steps", num_steps)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size)
    return num_steps if chunk_size is None else min(chunk_size, num_steps)


def scan_program(step_fn: Callable[[Carry, Array], tuple[Carry, Any]], num_steps: int,
                 chunk_size: int | None = None, *, donate: bool = False) -> ScanProgram:
    """The chunk ``carry, outs = lax.scan(step_fn, carry, t0 + arange(chunk))``, jitted.

    A final partial chunk is padded with skipped steps (the step is wrapped in
    ``lax.cond(t < num_steps, ...)``), so one compiled chunk serves the whole run.
    ``donate``: the chunk writes its output carry into the input carry's buffers
    (``donate_argnums``), so a device holds the carry once instead of twice (input and
    output) while a chunk runs; the carry passed to :func:`run_scan` is then consumed (its
    arrays are deleted) and only the returned one may be read.
    """
    chunk = _chunk(num_steps, chunk_size)
    padded = math.ceil(num_steps / chunk) * chunk != num_steps

    def guarded_step(c: Carry, t: Array) -> tuple[Carry, Any]:
        if not padded:
            return step_fn(c, t)
        out_shapes = jax.eval_shape(step_fn, c, t)[1]

        def skip(c: Carry, t: Array) -> tuple[Carry, Any]:
            del t
            return c, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out_shapes)

        return jax.lax.cond(t < num_steps, step_fn, skip, c, t)

    def run_chunk(c: Carry, t0: Array) -> tuple[Carry, Any]:
        return jax.lax.scan(guarded_step, c, t0 + jnp.arange(chunk, dtype=jnp.int32))

    return ScanProgram(jax.jit(run_chunk, donate_argnums=(0,) if donate else (),
                               compiler_options=compiler_options()), num_steps, chunk)


def run_scan(
    step_fn: Callable[[Carry, Array], tuple[Carry, Any]] | ScanProgram, carry: Carry,
    num_steps: int, *, chunk_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ScanResult:
    """Run ``carry, out = step_fn(carry, t)`` for t = 0..num_steps-1 as compiled scans.

    Args:
      step_fn: pure step; ``t`` is an int32 scalar shared by the whole batch. Or a
        :class:`ScanProgram` of it (:func:`scan_program`), to reuse its compiled chunk across
        calls (``num_steps`` and ``chunk_size`` must then be the program's).
      carry: the initial pytree (its shardings are kept by the compiled chunks).
      num_steps: number of steps.
      chunk_size: steps per compiled call (default: all of them in one call).
      progress: called as ``progress(steps_done, num_steps)`` after each chunk.
    """
    if isinstance(step_fn, ScanProgram):
        program, asked = step_fn, _chunk(num_steps, chunk_size)
        if (num_steps, asked) != (program.num_steps, program.chunk):
            raise ValueError(f"step_fn: a ScanProgram of {plural(program.num_steps, 'step')} in "
                             f"chunks of {program.chunk}, asked for {num_steps} in chunks of "
                             f"{asked}")
    else:
        program = scan_program(step_fn, num_steps, chunk_size)
    chunk = program.chunk
    num_chunks = math.ceil(num_steps / chunk)

    start = time.perf_counter()
    compiled = program.run_chunk.lower(carry, jnp.int32(0)).compile()
    compile_time = time.perf_counter() - start

    start = time.perf_counter()
    outputs = []
    for i in range(num_chunks):
        carry, out = compiled(carry, jnp.int32(i * chunk))
        outputs.append(to_host(out))
        if progress is not None:
            jax.block_until_ready(carry)
            progress(min((i + 1) * chunk, num_steps), num_steps)
    jax.block_until_ready(carry)
    run_time = time.perf_counter() - start
    stacked = jax.tree.map(lambda *xs: np.concatenate(xs)[:num_steps], *outputs)
    return ScanResult(carry, stacked, compile_time, run_time)


class Chunk(NamedTuple):
    """What ``on_chunk`` receives after every chunk: the run's position ``done`` out of
    ``total`` (env steps per seed, RL steps, parts: the trainer's unit), the carry after the
    chunk, the trainer's metrics for the chunk (each trainer documents its keys), and the
    position ``start`` this call of :func:`run_chunks` started from (a resumed run's
    checkpoint: a log written past it by the interrupted run is behind its newest rows)."""

    done: int
    total: int
    carry: Any
    metrics: Mapping[str, Any]
    start: int = 0


class ChunkedRun(NamedTuple):
    """Outcome of :func:`run_chunks`: the final carry, the chunks run by this call, and the
    position the call started from (above 0 when a checkpoint was resumed)."""

    carry: Any
    chunks: int
    done_at_start: int


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_chunks`: ``done`` of ``total`` units were run and
    ``checkpoint_step`` is the newest saved position (``None``: nothing saved)."""

    def __init__(self, done: int, total: int, checkpoint_step: int | None):
        super().__init__(f"interrupted at {done} of {total}")
        self.done = done
        self.total = total
        self.checkpoint_step = checkpoint_step


def run_chunks(
    advance: Callable[[Carry], tuple[Carry, Mapping[str, Any]]], carry: Carry, *,
    position: Callable[[Carry], int], total: int, max_chunks: int | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    save: Callable[[int, Carry], None] | None = None, saved_step: int | None = None,
    progress: str | None = None, unit: str = "step",
    cleanup: Sequence[Callable[[], None]] = (),
) -> ChunkedRun:
    """Advance ``carry`` chunk by chunk until ``position(carry) >= total``.

    Each chunk must move the position forward: an ``advance`` after which ``position`` is not
    an integer above the one before raises ``ValueError`` (a run that would never end).

    After each ``carry, metrics = advance(carry)``, with Ctrl-C held until both are done,
    ``on_chunk(Chunk(done, total, carry, metrics, start))`` runs and then ``save(done, carry)``
    (so what a hook wrote is never behind the newest checkpoint). A Ctrl-C raises
    :class:`TrainingInterrupted` with the newest saved position (``saved_step`` before the
    first save: the checkpoint a resumed run started from). ``cleanup`` callables run on
    every exit, in order, each even when an earlier one raises (the first such error is raised
    after all ran, unless the run itself is failing: then the run's error is the one raised).

    Args:
      advance: runs one chunk; returns the new carry and the chunk's metrics.
      carry: the initial (or resumed) carry.
      position: where a carry stands, in the unit of ``total``.
      total: the run's length; nothing runs when the carry is already there.
      max_chunks: stop after this many chunks in this call (to split a run across calls).
      on_chunk: the one per-chunk hook (logging, outputs written as they are produced).
      save: writes a checkpoint of the carry at ``done``.
      saved_step: the newest position already saved (a resumed run's checkpoint).
      progress: show a tqdm bar with this label (when tqdm is installed); it appears after
        the first chunk, so its rate and ETA leave out compilation.
      unit: what the bar counts, the unit of ``total`` (``"env step"``, ``"part"``).
      cleanup: closes the trainer's resources (environments, checkpoint managers, files).
    """
    check_int("total", total, low=0)
    if max_chunks is not None:
        check_int("max_chunks", max_chunks, low=0)
    start = done = _position(position, carry)
    chunks = 0
    bar = None
    try:
        try:
            if progress is not None and done < total:
                sys.stderr.write(f"{device_line(progress)}\n{progress}: compiling and running "
                                 "the first chunk (the progress bar starts after it)\n")
            while done < total and (max_chunks is None or chunks < max_chunks):
                carry, metrics = advance(carry)
                before, done = done, _position(position, carry)
                if done <= before:
                    raise ValueError(f"advance: a chunk must move the run forward, but "
                                     f"position stayed at {before} (total {total})"
                                     if done == before else f"advance: position went back "
                                     f"from {before} to {done}")
                chunks += 1
                with sigint_held():
                    if on_chunk is not None:
                        on_chunk(Chunk(done, total, carry, metrics, start))
                    if save is not None:
                        save(done, carry)
                        saved_step = done
                if progress is not None:
                    bar = update_bar(bar, progress, total, min(done, total), unit=unit)
        except KeyboardInterrupt:
            raise TrainingInterrupted(min(done, total), total, saved_step) from None
    except BaseException:
        _close_all([*cleanup, *([] if bar is None else [bar.close])], raise_first=False)
        raise
    _close_all([*cleanup, *([] if bar is None else [bar.close])])
    return ChunkedRun(carry, chunks, start)


def _position(position: Callable[[Carry], int], carry: Carry) -> int:
    """``position(carry)`` as an int; ``ValueError`` naming ``position`` otherwise."""
    value = position(carry)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"position: expected an integer position of the carry, got {value!r}")
    return int(value)


def update_bar(bar: Any, label: str, total: int, done: int, *, unit: str = "step",
               postfix: Mapping[str, Any] | None = None) -> Any:
    """Create a tqdm bar at ``done`` (called after the first chunk, so its rate and ETA leave
    out compilation) or move an existing one there; ``postfix`` is shown after the rate.
    Returns the bar (``None`` when tqdm is not installed)."""
    if bar is None:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return None
        bar = tqdm(total=total, initial=done, unit=unit, desc=label)
    else:
        bar.update(done - bar.n)
    if postfix:
        bar.set_postfix(postfix, refresh=True)
    return bar


COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
"""The ``jax.monitoring`` duration events that make up a program's compilation: tracing,
lowering to MLIR and the backend's compile."""


class CompileTime:
    """Seconds spent compiling inside a :func:`compile_timer` block (``seconds``)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, event: str, duration: float, **kwargs: Any) -> None:
        if event in COMPILE_EVENTS:
            self.seconds += duration


@contextlib.contextmanager
def compile_timer() -> Iterator[CompileTime]:
    """Measure the compilation inside the block from jax's own events (:data:`COMPILE_EVENTS`),
    whatever compiles there (a ``jit`` call, a program built inside a library call), so a rate
    can be reported over the run time alone: ``with compile_timer() as c: ...; c.seconds``."""
    timer = CompileTime()
    jax.monitoring.register_event_duration_secs_listener(timer)
    try:
        yield timer
    finally:
        jax.monitoring.unregister_event_duration_listener(timer)


def _close_all(closers: Sequence[Callable[[], None]], *, raise_first: bool = True) -> None:
    """Call every closer; then re-raise the first closer's error (``raise_first``), or drop
    them when the run is already failing (its own error is the one to report)."""
    error = None
    for close in closers:
        try:
            close()
        except Exception as err:  # noqa: BLE001 (re-raised below, after the others close)
            error = error or err
    if error is not None and raise_first:
        raise error


def log_grid(horizon: int, num: int = 50) -> np.ndarray:
    """About ``num`` log-spaced round counts in [1, horizon] (int, increasing, ends at horizon).

    Once ``num - 1 > 2 horizon ln(horizon) + 1`` consecutive points of the geometric grid are
    less than 1/2 apart, so every round 1..horizon is hit: that grid is returned without
    building ``num`` floats (``num = 2**31 - 1`` is every round, not 16 GB). Below that, a grid
    whose 32 bytes per point (the floats, their rounding and the sort) cannot fit in host
    memory raises ``ValueError`` with the estimate.
    """
    check_positive("horizon", horizon)
    check_positive("num", num)
    if num - 1 > 2 * horizon * math.log(horizon) + 1:
        return np.arange(1, int(horizon) + 1, dtype=np.int64)
    check_memory(f"num = {num}", 32 * num, host_memory_bytes(),
                 f"host memory for {num:,} log-spaced points")
    grid = np.unique(np.round(np.geomspace(1, horizon, num)).astype(np.int64))
    return np.union1d(grid, [horizon])


def shard_leading_axis(tree: Any, devices: list[Any] | None = None) -> Any:
    """Place every leaf's leading axis across ``devices`` (default: all) on a 1-D mesh "runs".

    With one device the tree is just placed on it. The leading axis must be a multiple of the
    device count.
    """
    devices = jax.devices() if devices is None else list(devices)
    if len(devices) == 1:
        return jax.device_put(tree, devices[0])
    sharding = NamedSharding(Mesh(np.asarray(devices), ("runs",)), PartitionSpec("runs"))
    return jax.device_put(tree, sharding)


def to_host(tree: Any) -> Any:
    """Every leaf of ``tree`` as one host NumPy array holding all its shards.

    A leaf sharded over several processes' devices (``jax.distributed``) is gathered with
    ``jax.experimental.multihost_utils.process_allgather``: a collective, so every process
    must call this on the same arrays in the same order, and each gets the whole array.
    """
    def fetch(leaf: Any) -> np.ndarray:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(leaf)

    return jax.tree.map(fetch, tree)
