"""The compiled loop and its host driver (``hyperx.loop``)."""

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hyperx.loop as loop
from hyperx._host import sigint_held
from hyperx.loop import (
    Chunk,
    TrainingInterrupted,
    compile_timer,
    log_grid,
    run_chunks,
    run_scan,
    scan_program,
)


def test_log_grid_by_hand():
    np.testing.assert_array_equal(log_grid(1000, 4), [1, 10, 100, 1000])
    np.testing.assert_array_equal(log_grid(1), [1])
    grid = log_grid(777, 30)
    assert grid[0] == 1 and grid[-1] == 777 and np.all(np.diff(grid) > 0)


def test_run_scan_chunks_and_padding_match_one_scan():
    def step(c, t):
        return c + t, 2 * t

    calls = []
    whole = run_scan(step, jnp.int32(0), 10)
    chunked = run_scan(step, jnp.int32(0), 10, chunk_size=4,
                       progress=lambda done, total: calls.append((done, total)))
    assert int(whole.carry) == int(chunked.carry) == 45
    np.testing.assert_array_equal(whole.outputs, np.arange(10) * 2)
    np.testing.assert_array_equal(chunked.outputs, np.arange(10) * 2)
    assert calls == [(4, 10), (8, 10), (10, 10)]


def _count_run(events, *, interrupt_at=None, where="hook"):
    """A driver run over an int carry stepping by 3 to 10, recording what happens in order;
    SIGINT is sent to this process at position ``interrupt_at``, in the hook or the advance."""

    def advance(c):
        if where == "advance" and c == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        events.append(("advance", c))
        return c + 3, {"c": c}

    def hook(chunk):
        events.append(("hook", chunk.done, chunk.total, chunk.carry, dict(chunk.metrics)))
        if where == "hook" and chunk.done == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)

    def save(done, carry):
        with sigint_held():  # a save that holds Ctrl-C itself (as CheckpointManager.save)
            events.append(("save", done, carry))

    return advance, hook, save


def test_run_chunks_orders_advance_hook_and_save_and_stops_at_the_total():
    """Hand-traced: positions 1 -> 4 -> 7 -> 10 (three chunks to reach total 10); the hook
    sees each chunk before its save; cleanup runs once."""
    events, closed = [], []
    advance, hook, save = _count_run(events)
    run = run_chunks(advance, 1, position=int, total=10, on_chunk=hook, save=save,
                     cleanup=(lambda: closed.append(1),))
    assert run == loop.ChunkedRun(10, 3, 1)
    assert events == [("advance", 1), ("hook", 4, 10, 4, {"c": 1}), ("save", 4, 4),
                      ("advance", 4), ("hook", 7, 10, 7, {"c": 4}), ("save", 7, 7),
                      ("advance", 7), ("hook", 10, 10, 10, {"c": 7}), ("save", 10, 10)]
    assert closed == [1]
    events.clear()
    assert run_chunks(advance, 10, position=int, total=10, on_chunk=hook) == (10, 0, 10)
    assert events == []  # a finished (resumed) run runs nothing
    assert run_chunks(advance, 1, position=int, total=10, max_chunks=2).carry == 7


def test_ctrl_c_in_a_hook_finishes_the_save_then_raises_with_the_saved_position():
    """SIGINT during the hook of the chunk ending at 7: its save (which holds Ctrl-C itself,
    nested) still runs, then TrainingInterrupted names position 7 as saved; nothing after."""
    events, closed = [], []
    advance, hook, save = _count_run(events, interrupt_at=7)
    with pytest.raises(TrainingInterrupted) as stop:
        run_chunks(advance, 1, position=int, total=10, on_chunk=hook, save=save,
                   cleanup=(lambda: closed.append(1),))
    assert (stop.value.done, stop.value.total, stop.value.checkpoint_step) == (7, 10, 7)
    assert events[-1] == ("save", 7, 7) and ("advance", 7) not in events
    assert closed == [1]


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler for the test, whatever an earlier test in this worker left
    installed (in the full suite under xdist one did), restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_a_chunk_reports_the_last_save_or_the_resumed_one(default_sigint):
    events = []
    advance, hook, save = _count_run(events, interrupt_at=4, where="advance")
    with pytest.raises(TrainingInterrupted) as stop:
        run_chunks(advance, 1, position=int, total=10, on_chunk=hook, save=save)
    assert (stop.value.done, stop.value.checkpoint_step) == (4, 4)
    events.clear()
    advance, hook, save = _count_run(events, interrupt_at=1, where="advance")
    with pytest.raises(TrainingInterrupted) as stop:
        run_chunks(advance, 1, position=int, total=10, save=save, saved_step=1)
    assert (stop.value.done, stop.value.checkpoint_step) == (1, 1)
    with pytest.raises(TrainingInterrupted) as stop:
        run_chunks(lambda c: os.kill(os.getpid(), signal.SIGINT), 0, position=int, total=5)
    assert stop.value.checkpoint_step is None


def test_every_cleanup_runs_and_the_first_error_wins():
    closed = []

    def failing():
        closed.append("a")
        raise OSError("first")

    def advance(c):
        raise ValueError("in the chunk")

    with pytest.raises(ValueError, match="in the chunk"):
        run_chunks(advance, 0, position=int, total=1,
                   cleanup=(failing, lambda: closed.append("b")))
    assert closed == ["a", "b"]
    closed.clear()
    with pytest.raises(OSError, match="first"):
        run_chunks(lambda c: (c + 1, {}), 0, position=int, total=1,
                   cleanup=(failing, lambda: closed.append("b")))
    assert closed == ["a", "b"]


def test_progress_bar_starts_after_the_first_chunk(monkeypatch, capsys):
    """The bar (so its rate and ETA) is created once the first chunk, which includes the
    compilation, is done: its clock starts at the first chunk's position, not at 0."""
    calls = []
    real = loop.update_bar
    monkeypatch.setattr(loop, "update_bar", lambda bar, label, total, done, unit: calls.append(
        (bar is None, label, total, done, unit)) or real(bar, label, total, done, unit=unit))
    run_chunks(lambda c: (c + 6, {}), 0, position=int, total=24, progress="deepsea",
               unit="env step")
    assert calls == [(True, "deepsea", 24, 6, "env step"), (False, "deepsea", 24, 12, "env step"),
                     (False, "deepsea", 24, 18, "env step"), (False, "deepsea", 24, 24, "env step")]
    assert "deepsea: compiling and running the first chunk" in capsys.readouterr().err


def test_run_chunks_refuses_bad_arguments():
    with pytest.raises(ValueError, match="total"):
        run_chunks(lambda c: (c, {}), 0, position=int, total=-1)
    with pytest.raises(ValueError, match="max_chunks"):
        run_chunks(lambda c: (c, {}), 0, position=int, total=1, max_chunks=-2)


def test_run_chunks_refuses_an_advance_that_makes_no_progress():
    """An advance that leaves the position where it was would loop for ever: the first such
    chunk raises, naming advance; so does a position that goes back or is not an integer."""
    with pytest.raises(ValueError, match="advance: a chunk must move the run forward, but "
                                         "position stayed at 0"):
        run_chunks(lambda c: (c, {}), 0, position=lambda c: c, total=5)
    with pytest.raises(ValueError, match="advance: position went back from 3 to 1"):
        run_chunks(lambda c: (c - 2 if c == 3 else c + 3, {}), 0, position=lambda c: c,
                   total=9)
    with pytest.raises(ValueError, match="position: expected an integer"):
        run_chunks(lambda c: (c + 1, {}), 0, position=lambda c: c / 2, total=5)
    assert run_chunks(lambda c: (c + 2, {}), np.int64(0), position=lambda c: c,
                      total=5).chunks == 3


@pytest.mark.parametrize("chunk_size", [2.5, 0, -1, True])
def test_run_scan_refuses_a_chunk_size_that_is_not_a_positive_integer(chunk_size):
    """chunk_size=2.5 once ran steps 2 and 7 twice (the chunk starts at i * 2.5, cast)."""
    def step(c, t):
        return c + 1, t

    with pytest.raises(ValueError, match="chunk_size"):
        run_scan(step, jnp.int32(0), 10, chunk_size=chunk_size)
    with pytest.raises(ValueError, match="chunk_size"):
        run_scan(scan_program(step, 10, 2), jnp.int32(0), 10, chunk_size=chunk_size)


def test_chunk_is_what_every_trainer_hands_its_hook():
    chunk = Chunk(3, 10, "carry", {"loss": 1.0})
    assert (chunk.done, chunk.total, chunk.carry, chunk.metrics["loss"]) == (3, 10, "carry", 1.0)


def test_a_held_scan_program_runs_again_and_refuses_other_lengths():
    """Hand-computed: sum of t over 0..9 is 45 from carry 0, 145 from carry 100; a program of
    10 steps in chunks of 4 (padded to 12) refuses 9 steps or chunks of 5."""
    program = scan_program(lambda c, t: (c + t, t), 10, 4)
    assert int(run_scan(program, jnp.int32(0), 10, chunk_size=4).carry) == 45
    again = run_scan(program, jnp.int32(100), 10, chunk_size=4)
    assert int(again.carry) == 145 and again.outputs.shape == (10,)
    for num_steps, chunk in ((9, 4), (10, 5), (10, None)):
        with pytest.raises(ValueError, match="step_fn: a ScanProgram of 10 steps in chunks of 4"):
            run_scan(program, jnp.int32(0), num_steps, chunk_size=chunk)


def test_a_donating_program_reuses_the_carry_buffers_and_computes_the_same():
    """``donate=True``: the carry passed in is consumed (its arrays deleted: the device held it
    once), the result is the non-donating program's (hand-computed: 45 + 0..9 per entry)."""

    def step(c, t):
        return c + t, t

    results = {}
    for donate in (False, True):
        carry = jnp.arange(3, dtype=jnp.int32)
        program = scan_program(step, 10, 4, donate=donate)
        results[donate] = run_scan(program, carry, 10, chunk_size=4).carry
        assert carry.is_deleted() == donate
    np.testing.assert_array_equal(results[True], results[False])
    np.testing.assert_array_equal(results[True], 45 + np.arange(3))


def test_no_module_keeps_compiled_programs_in_a_global_cache():
    """Programs are returned to their callers (issue 23): no module-level ``lru_cache`` or
    ``cache`` decorator anywhere in the package (a learner's own per-dimension memo is local)."""
    import pathlib
    import re

    root = pathlib.Path(loop.__file__).parent
    found = [f"{p.relative_to(root)}:{i + 1}" for p in root.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines())
             if re.match(r"@(functools\.)?(lru_)?cache\b", line.strip())]
    assert found == []


def test_compile_timer_counts_compilation_and_not_a_cached_call():
    f = jax.jit(lambda x: jnp.sin(x) @ x.T)
    x = jnp.ones((8, 8))
    with compile_timer() as first:
        f(x).block_until_ready()
    with compile_timer() as again:
        f(x).block_until_ready()
    assert first.seconds > 0 and again.seconds == 0
