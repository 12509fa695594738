"""Our Atari front end (envpool) against the authors' HyperAgent wrappers on the same actions.

Slow: needs the authors' environment (the ``authors_hyperagent`` fixture). Their training env
(gym 0.23 + ale-py 0.8.1 under their ``wrap_atari``: no-op starts, max-pool over the last two
RGB frames, then cv2's grayscale and INTER_AREA resize, episodic life, clipped rewards, a stack
of 4) and ours (``make_atari("Freeway")`` on envpool: grayscale first, then max-pool and area
resize, all in C++), both from a reset with exactly one no-op (their ``NoopResetEnv`` set to
``noop_max = 1``; envpool draws ``1 + U{0, ..., noop_max - 1}`` no-ops in games without FIRE),
play one whole Freeway game with the same actions.
"""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from hyperx.envs.atari import make_atari

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def play_ours(actions: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    env = make_atari("Freeway", num_envs=1, noop_max=1)
    obs, _ = env.reset()
    stacks, rewards, dones = [obs[0]], [], []
    for action in actions[:steps]:
        obs, reward, terminated, truncated, _ = env.step(np.array([action]))
        stacks.append(obs[0])
        rewards.append(reward[0])
        dones.append(terminated[0] or truncated[0])
    env.close()
    return {"stacks": np.stack(stacks), "rewards": np.asarray(rewards, np.float32),
            "dones": np.asarray(dones)}


@pytest.mark.slow
def test_freeway_frames_rewards_and_ends_equal_the_authors_wrappers(authors_hyperagent,
                                                                   tmp_path):
    """Measured (2,048 steps, actions 65% UP): the same 12 rewards at the same steps, the game
    over at the same step, and pixels equal to within 2 gray levels except 0.3% of them
    (at most 0.9% in any one stack; mean absolute difference 0.02 of 255), from moving cars
    where the max over RGB frames and the max over gray frames differ. Bounds: three times
    the measured shares; the game must score (the chicken crosses) so that it is not a
    comparison of two still screens."""
    import hyperagent_ref_env

    python, checkout = authors_hyperagent
    actions = np.random.default_rng(0).choice(3, size=2100, p=[0.2, 0.65, 0.15])
    np.savez(tmp_path / "actions.npz", actions=actions)
    subprocess.run([python,
                    str(BENCHMARKS / "hyperagent_ref_peer.py"), "frames", "--checkout", checkout,
                    "--inputs", str(tmp_path / "actions.npz"), "--out", str(tmp_path / "f.npz")],
                   check=True, env=hyperagent_ref_env.environ())
    theirs = np.load(tmp_path / "f.npz")
    steps = len(theirs["rewards"])
    assert theirs["dones"][-1] and 2000 < steps < len(actions)  # one whole game, then stop
    ours = play_ours(actions, steps)
    np.testing.assert_array_equal(ours["dones"], theirs["dones"])
    np.testing.assert_array_equal(ours["rewards"], theirs["rewards"])
    assert theirs["rewards"].sum() >= 5
    diff = np.abs(ours["stacks"].astype(int) - theirs["stacks"].astype(int))
    assert diff.shape == (steps + 1, 4, 84, 84)
    off = (diff > 2).reshape(steps + 1, -1).mean(axis=1)
    print(f"mean |diff| {diff.mean():.3f}, share > 2: {off.mean():.4f} (max {off.max():.4f})")
    assert off.mean() < 0.009 and off.max() < 0.027
    assert diff.mean() < 0.06
