"""Every ``hyperx`` command run as a person runs it: the installed console script in a
pseudo-terminal, progress bar on (no ``--quiet``), at tiny sizes; each test reads what the
command printed and wrote (the ``terminal`` fixture, tests/conftest.py).

The CLI tests elsewhere call ``main`` in-process, most with ``--quiet``; a crash in the progress
bar's code (``hyperx atari`` once died after its first chunk this way) only shows here. DeepSea
and plot run in the default suite; the other commands (30 s to 2 minutes each on two loaded
cores) run with the slow tests, which CI runs after the default suite.
"""

from __future__ import annotations

import json

import pytest


def _check_ran(run, *, bar: str) -> str:
    """The run exited 0 with no traceback, named the device it ran on and drew its bar
    (``bar``: the bar's label)."""
    assert run.returncode == 0, run.text[-3000:]
    assert "Traceback" not in run.text, run.text[-3000:]
    assert f"{bar}: jax " in run.text and " on cpu (1 device: cpu)" in run.text, run.text[:2000]
    assert f"{bar}:" in run.text and "100%|" in run.text, run.text[-3000:]
    return run.text


def _check_recorded(out) -> None:
    """run.json and summary.json record the versions, the device and the commit."""
    for name in ("run.json", "summary.json"):
        env = json.loads((out / name).read_text())["environment"]
        assert env["hyperx"] == "0.1.0" and env["jax"] and env["backend"] == "cpu", env
        assert env["device_count"] >= 1 and "commit" in env, env


@pytest.mark.slow
def test_atari_with_its_progress_bar_writes_the_summary_and_plot(terminal, tmp_path):
    """The documented ``hyperx atari --game Pong --agent dqn ...`` command without ``--quiet``,
    at a tiny size (a tiny replay, two chunks; about a minute and a half on two loaded cores,
    the environment's and the loop's compiles: slow)."""
    argv = ["atari", "--game", "pong", "--agent", "dqn", "--steps", "256", "--envs-per-seed",
            "4", "--eval-every", "128", "--eval-episodes", "1", "--learning-starts", "64",
            "--buffer-size", "512", "--checkpoint", "--out", "run"]
    text = _check_ran(terminal(argv, cwd=tmp_path), bar="atari")
    assert "compiling the training loop" in text
    assert "env steps/s" in text and "final greedy score" in text
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["env_steps_per_seed"] == 256 and summary["game"] == "Pong"
    assert (tmp_path / "run" / "returns.png").stat().st_size > 1000
    _check_recorded(tmp_path / "run")
    again = terminal([*argv, "--resume"], cwd=tmp_path)
    assert again.returncode == 0 and "run is complete" in again.text, again.text
    run = terminal(["atari", "--eval-only", "--record-video", "1", "--out", "run"],
                   cwd=tmp_path)
    assert run.returncode == 0 and "the checkpoint of env step 256" in run.text, run.text
    result = json.loads((tmp_path / "run" / "eval_only.json").read_text())
    assert result["env_step"] == 256 and len(result["scores"]) == 1
    assert (tmp_path / "run" / "videos" / "seed0_game0.mp4").stat().st_size > 1000


@pytest.mark.slow
def test_bandit_with_its_progress_bar(terminal, tmp_path):
    run = terminal(["bandit", "--dim", "3", "--arms", "4", "--steps", "50", "--seeds", "4",
                    "--agents", "uniform,linucb", "--out", "b"], cwd=tmp_path)
    text = _check_ran(run, bar="bandit")
    assert "part/s" in text or "s/part" in text, text  # the bar counts parts, not steps
    assert "final regret" in text and (tmp_path / "b" / "regret.png").exists()
    _check_recorded(tmp_path / "b")


def test_deepsea_with_its_progress_bar_then_eval_only(terminal, tmp_path):
    argv = ["deepsea", "--size", "4", "--seeds", "2", "--episodes", "40", "--checkpoint",
            "--out", "d"]
    text = _check_ran(terminal(argv, cwd=tmp_path), bar="deepsea")
    assert "env steps/s summed over 2 seeds" in text, text
    assert (tmp_path / "d" / "deepsea.png").exists()
    _check_recorded(tmp_path / "d")
    again = terminal(argv, cwd=tmp_path)
    assert again.returncode == 0 and "run is complete" in again.text, again.text
    run = terminal(["deepsea", "--eval-only", "--eval-episodes", "3", "--out", "d"],
                   cwd=tmp_path)
    assert run.returncode == 0 and "the checkpoint of env step 160" in run.text, run.text
    result = json.loads((tmp_path / "d" / "eval_only.json").read_text())
    assert result["env_step"] == 160 and len(result["returns"]) == 2
    assert all(len(r) == 3 for r in result["returns"])
    refused = terminal(["deepsea", "--eval-only", "--out", "elsewhere"], cwd=tmp_path)
    assert refused.returncode == 2 and "holds no hyperx deepsea run" in refused.text


@pytest.mark.slow
def test_games_with_its_progress_bar(terminal, tmp_path):
    run = terminal(["games", "--steps", "20", "--seeds", "4", "--actions", "3",
                    "--seeds-per-part", "2", "--out", "g"], cwd=tmp_path)
    text = _check_ran(run, bar="games")
    assert "seed-rounds/s" in text and (tmp_path / "g" / "regret.png").exists()
    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert all(m["compile_time_s"] > 0 for m in summary["matchups"].values())
    _check_recorded(tmp_path / "g")


@pytest.mark.slow
def test_llm_with_its_warm_up_and_progress_bar(terminal, tmp_path):
    """A minute and a half on two loaded cores (the warm-up, RL step and evaluation compile)."""
    run = terminal(["llm", "--steps", "4", "--warmup-steps", "4", "--prompts", "2",
                    "--group-size", "2", "--d-model", "16", "--layers", "1", "--heads", "2",
                    "--checkpoint-every", "2", "--out", "l"], cwd=tmp_path)
    text = _check_ran(run, bar="hyperx llm")
    assert "supervised warm-up (4 steps" in text
    assert text.index("warm-up") < text.index("compiling the RL step") < text.index("100%|")
    assert (tmp_path / "l" / "curves.png").exists()
    _check_recorded(tmp_path / "l")


def test_plot_of_a_run_in_a_terminal(terminal, tmp_path):
    (tmp_path / "d").mkdir()
    rows = [f"{s},{e},0.5,0" for e in range(1, 6) for s in (0, 1)]
    (tmp_path / "d" / "returns.csv").write_text("\n".join(["seed,episode,return,bad", *rows]))
    run = terminal(["plot", "d"], cwd=tmp_path)
    assert run.returncode == 0 and "wrote d/deepsea.png" in run.text, run.text
    assert (tmp_path / "d" / "deepsea.png").stat().st_size > 1000


@pytest.mark.slow
def test_demo_in_a_terminal(terminal, tmp_path):
    """The demo's three parts at a small size (two minutes on two loaded cores: slow)."""
    run = terminal(["demo", "--steps", "20", "--seeds", "10", "--dim", "3", "--index-dim", "2",
                    "--out", "demo"], cwd=tmp_path)
    text = _check_ran(run, bar="bandit")
    assert "[3/3]" in text and (tmp_path / "demo" / "deepsea" / "deepsea.png").exists()
