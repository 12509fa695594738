"""The CleanRL A/B harness of ``benchmarks/atari_throughput.py`` without CleanRL itself (no
GitHub here): ``cleanrl_peer.py train`` runs a checkout's ``cleanrl/dqn_atari_jax.py`` as
``__main__`` with its own arguments and records one time per env step; the training-phase
rate skips ``learning_starts + warmup`` steps; the summary's ratios are per round."""

import json
import os
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import atari_throughput  # noqa: E402
import cleanrl_env  # noqa: E402

FAKE_SCRIPT = textwrap.dedent("""
    # Stands in for cleanrl/dqn_atari_jax.py: steps a SyncVectorEnv --total-timesteps times.
    import sys
    import gymnasium as gym
    from cleanrl_utils.marker import MARK

    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    envs.reset(seed=0)
    for _ in range(int(args["--total-timesteps"])):
        envs.step(envs.action_space.sample())
    if __name__ == "__main__":
        open(MARK, "w").write(" ".join(sys.argv[1:]))
""")


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "cleanrl").mkdir()
    (tmp_path / "cleanrl" / "dqn_atari_jax.py").write_text(FAKE_SCRIPT)
    (tmp_path / "cleanrl_utils").mkdir()  # importable from the checkout, as CleanRL's is
    (tmp_path / "cleanrl_utils" / "marker.py").write_text(f"MARK = {str(tmp_path / 'ran')!r}\n")
    return tmp_path


def test_the_peer_runs_the_script_as_main_and_times_every_env_step(checkout):
    row = atari_throughput.cleanrl_train(sys.executable, str(checkout), "Breakout", steps=30,
                                         learning_starts=5, warmup=4)
    ran = (checkout / "ran").read_text().split()
    assert ran[ran.index("--env-id") + 1] == "BreakoutNoFrameskip-v4"
    assert ran[ran.index("--total-timesteps") + 1] == "40"  # 5 + 4 + 30 + 1
    assert ran[ran.index("--learning-starts") + 1] == "5"
    assert row["driver"] == "cleanrl" and row["agent"] == "dqn"
    assert row["env_steps"] == 30  # the 40 times minus the first 5 + 4 + 1
    assert 0 < row["env_steps_per_s"] < float("inf")


def test_the_peer_wrapper_records_increasing_times(checkout, tmp_path):
    import subprocess

    out = tmp_path / "times.json"
    subprocess.run([sys.executable, str(BENCHMARKS / "cleanrl_peer.py"), "train", "--checkout",
                    str(checkout), "--out", str(out), "--", "--total-timesteps", "12"],
                   check=True, env=cleanrl_env.environ(), cwd=tmp_path)
    record = json.loads(out.read_text())
    times = record["step_times"]
    assert len(times) == 12 and times == sorted(times) and times[0] > record["start"]
    assert record["argv"] == ["--total-timesteps", "12"]


def test_peer_summary_takes_the_median_of_per_round_ratios():
    rows = []
    for r, (peer, ours, own) in enumerate([(100, 150, 120), (80, 160, 100), (90, 90, 90)]):
        rows += [dict(condition="quiet", round=r, driver="cleanrl", settings="cleanrl",
                      env_steps_per_s=peer),
                 dict(condition="quiet", round=r, driver="compiled", settings="cleanrl",
                      env_steps_per_s=ours),
                 dict(condition="quiet", round=r, driver="compiled", settings="own",
                      env_steps_per_s=own)]
    summary = atari_throughput.peer_summary(rows)["quiet"]
    assert summary["rounds"] == 3 and summary["cleanrl_median"] == 90
    assert summary["ratio_cleanrl_settings_median"] == pytest.approx(1.5)  # of 1.5, 2, 1
    assert summary["ratio_cleanrl_settings_range"] == [1.0, 2.0]
    assert summary["ratio_own_settings_median"] == pytest.approx(1.2)  # of 1.2, 1.25, 1
    assert summary["ours_cleanrl_settings_range"] == [90, 160]


def test_cleanrl_environment_pins_our_jax_and_strips_our_path(monkeypatch):
    requirements = cleanrl_env.requirements()
    for name in ("jax", "jaxlib", "flax", "optax", "numpy"):
        assert f"{name}=={metadata.version(name)}" in requirements
    assert "gymnasium==0.29.1" in requirements and "ale-py==0.9.0" in requirements
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    assert "PYTHONPATH" not in cleanrl_env.environ()
    assert cleanrl_env.environ()["PATH"] == os.environ["PATH"]
