import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")

SCRIPT = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    from hyperx.agents import get_config
    from hyperx.agents.deepsea import train_deepsea

    ckpt, out, max_chunks = sys.argv[1], sys.argv[2], sys.argv[3]
    config = get_config("hyperagent", learning_starts=8, batch_size=8, n_step=2)
    result = train_deepsea(config, 4, 6, num_seeds=2, chunk_steps=5,
                           checkpoint_dir=None if ckpt == "-" else ckpt,
                           max_chunks=None if max_chunks == "-" else int(max_chunks))
    np.savez(out, *[np.asarray(x) for x in jax.tree.leaves(result.carry)])
    print(result.steps_done)
""")


def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_resume_in_a_fresh_process_is_bitwise_identical(tmp_path):
    """24 steps (6 episodes of N = 4) in chunks of 5: the first process stops after 2 chunks,
    at step 10, in the middle of episode 3 and after learning has started (step 8); a fresh
    process resumes from the orbax checkpoint and finishes in 3 chunks (a restart from step 0
    could not). Every leaf of the final carry (params, target params, Adam state, replay, env
    state, keys, returns, bad flags, step counter) must equal an uninterrupted run's bit for
    bit."""
    ckpt = str(tmp_path / "ckpt")
    assert _run(ckpt, str(tmp_path / "first.npz"), "2") == "10"
    assert _run(ckpt, str(tmp_path / "resumed.npz"), "3") == "24"
    assert _run("-", str(tmp_path / "full.npz"), "-") == "24"
    resumed = np.load(tmp_path / "resumed.npz")
    full = np.load(tmp_path / "full.npz")
    first = np.load(tmp_path / "first.npz")
    assert len(resumed.files) == len(full.files) > 20
    for name in full.files:
        assert resumed[name].dtype == full[name].dtype
        np.testing.assert_array_equal(resumed[name], full[name], err_msg=name)
    assert any(not np.array_equal(first[n], full[n]) for n in full.files)


def test_resume_refuses_a_different_run(tmp_path):
    from hyperx.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path), {"agent": "dqn", "size": 4})
    manager.save(3, {"x": np.arange(3, dtype=np.int32)})
    manager.close()
    again = CheckpointManager(str(tmp_path), {"agent": "dqn", "size": 4})
    restored = again.restore_latest({"x": np.zeros(3, np.int32)})
    np.testing.assert_array_equal(restored["x"], np.arange(3))
    other = CheckpointManager(str(tmp_path), {"agent": "dqn", "size": 5})
    with pytest.raises(ValueError, match="holds a different run, size: 4 .saved. vs 5 .now."):
        other.restore_latest({"x": np.zeros(3, np.int32)})


def _two_steps(tmp_path):
    from hyperx.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path), {"run": 1})
    for step in (1, 2):
        manager.save(step, {"x": np.arange(4096, dtype=np.float32) * step, "t": np.int32(step)})
    manager.close()
    return lambda: CheckpointManager(str(tmp_path), {"run": 1}).restore_latest(
        {"x": np.zeros(4096, np.float32), "t": np.int32(0)})


def _largest_file(directory):
    files = [p for p in directory.rglob("*") if p.is_file()]
    return max(files, key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("damage", ["flip", "truncate", "checksum"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_step(tmp_path, capsys, damage):
    restore = _two_steps(tmp_path)
    if damage == "checksum":
        (tmp_path / "2" / "integrity" / "metadata").write_text('{"sha256": "0"}')
    else:
        path = _largest_file(tmp_path / "2" / "carry")
        data = bytearray(path.read_bytes())
        if damage == "flip":
            for i in range(0, min(100, len(data))):
                data[len(data) // 2 - 50 + i] ^= 0xFF
        path.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate" else bytes(data))
    restored = restore()
    assert int(restored["t"]) == 1
    np.testing.assert_array_equal(restored["x"], np.arange(4096, dtype=np.float32))
    warning = [line for line in capsys.readouterr().err.splitlines() if "hyperx" in line]
    assert len(warning) == 1 and "step 2" in warning[0] and "resuming from step 1" in warning[0]


def test_the_restored_step_is_the_one_restored_not_the_newest_on_disk(tmp_path, capsys):
    """After a fallback the run's saved position is the older step: an interrupt before the
    next save must not report the damaged step as saved (Atari and DeepSea pass it on)."""
    from hyperx.checkpoint import CheckpointManager

    _two_steps(tmp_path)
    (tmp_path / "2" / "integrity" / "metadata").write_text('{"sha256": "0"}')
    manager = CheckpointManager(str(tmp_path), {"run": 1})
    assert manager.restored_step is None
    manager.restore_latest({"x": np.zeros(4096, np.float32), "t": np.int32(0)})
    assert (manager.latest_step(), manager.restored_step) == (2, 1)
    manager.close()
    empty = CheckpointManager(str(tmp_path / "new"), {"run": 1})
    empty.restore_latest({"t": np.int32(0)})
    assert empty.restored_step is None
    empty.close()


def test_no_intact_checkpoint_fails_in_one_line(tmp_path):
    restore = _two_steps(tmp_path)
    for step in ("1", "2"):
        (tmp_path / step / "integrity" / "metadata").write_text('{"sha256": "0"}')
    with pytest.raises(ValueError, match="no intact checkpoint") as info:
        restore()
    assert "\n" not in str(info.value)


def test_a_different_run_names_the_option_in_one_line(tmp_path):
    from hyperx.checkpoint import CheckpointManager

    manager = CheckpointManager(str(tmp_path), {"seed": 0, "chunk_steps": 5})
    manager.save(1, {"x": np.zeros(2, np.int32)})
    manager.close()
    other = CheckpointManager(str(tmp_path), {"seed": 1, "chunk_steps": 5})
    with pytest.raises(ValueError, match=r"seed: 0 \(saved\) vs 1 \(now\)") as info:
        other.restore_latest({"x": np.zeros(2, np.int32)})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("damage", ["all steps", "latest step"])
def test_deepsea_resume_past_damaged_checkpoints_ends_with_its_message_only(tmp_path, damage):
    """``hyperx deepsea --resume`` with no intact checkpoint exits 2 with its one-line error,
    and after a fallback past a damaged step finishes normally; neither is followed by a
    traceback (such as asyncio's "Event loop is closed" from an orbax manager left open)."""
    import json

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "hyperx", "deepsea", "--size", "4", "--episodes", "6",
            "--seeds", "1", "--chunk-steps", "8", "--agent", "dqn", "--checkpoint", "--quiet",
            "--out", str(out)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**manifest, "complete": False}))
    steps = sorted((out / "checkpoints").iterdir(), key=lambda p: int(p.name))
    assert len(steps) == 2
    for step in steps if damage == "all steps" else steps[-1:]:
        path = _largest_file(step / "carry")
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    proc = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr, (
        proc.stderr[-3000:])
    if damage == "all steps":
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        assert "no intact checkpoint" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"resuming from step {steps[0].name}" in proc.stderr
