"""DeepSea outputs survive interruptions: returns are on disk chunk by chunk, Ctrl-C stops
cleanly with where to resume, ``--resume`` finishes the run, a finished run says so."""

import csv
import os
import signal
import subprocess
import sys
import time

import numpy as np

from hyperx.agents import get_config
from hyperx.agents.deepsea import train_deepsea
from hyperx.agents.deepsea_summary import summarise, uniform_chance
from hyperx.commands import main
from hyperx.commands.deepsea import ReturnsWriter

CONFIG = get_config("dqn", learning_starts=8, batch_size=8)


def _rows(path):
    with open(path) as f:
        return [(int(r["seed"]), int(r["episode"])) for r in csv.DictReader(f)]


def test_returns_are_written_chunk_by_chunk(tmp_path):
    """Two of four chunks: the CSV already holds those chunks' episodes, in episode order."""
    writer = ReturnsWriter(tmp_path / "returns.csv")
    seen = []

    def on_chunk(chunk):
        writer(chunk.carry.seeds.returns, chunk.carry.seeds.bad, chunk.done // 3)
        seen.append(len(_rows(tmp_path / "returns.csv")))

    result = train_deepsea(CONFIG, 3, 8, num_seeds=2, chunk_steps=6, max_chunks=2,
                           on_chunk=on_chunk)
    assert result.steps_done == 12 and seen == [4, 8]
    assert _rows(tmp_path / "returns.csv") == [(s, e) for e in (1, 2, 3, 4) for s in (0, 1)]


def test_summary_flags_chance_level_sizes():
    assert uniform_chance(3, 40) > 0.8 and uniform_chance(20, 2000) < 1e-3
    result = train_deepsea(CONFIG, 3, 8, num_seeds=2, chunk_steps=6)
    summary = summarise(result, agent="dqn", size=3)
    assert summary["bsuite_criterion_at_chance_level"] is True
    assert "0.9 x 0.99" in summary["criteria"]["learned_episode_running_mean"]


def _command(out, *extra):
    return [sys.executable, "-m", "hyperx", "deepsea", "--size", "3", "--agent", "dqn",
            "--seeds", "2", "--episodes", "1200", "--chunk-steps", "150", "--checkpoint",
            "--quiet", "--out", str(out), *extra]


def test_ctrl_c_stops_cleanly_and_resume_finishes_the_run(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(_command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 240
    while not (out / "returns.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert lines[-1].startswith("hyperx: interrupted: ") and "--resume" in lines[-1]
    assert not list(out.rglob("*orbax-checkpoint-tmp*"))
    written = _rows(out / "returns.csv")
    assert written and len(written) % 2 == 0

    done = subprocess.run(_command(out, "--resume"), capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(out / "returns.csv")
    assert sorted(rows) == sorted((s, e) for e in range(1, 1201) for s in (0, 1))


def test_complete_checkpointed_run_says_so(tmp_path, capsys):
    """Resuming from a checkpoint of a finished run (the manifest lost its 'complete' mark)
    runs nothing and says the run is complete instead of printing a rate."""
    argv = ["deepsea", "--size", "3", "--agent", "dqn", "--seeds", "2", "--episodes", "8",
            "--chunk-steps", "12", "--checkpoint", "--quiet", "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    manifest = tmp_path / "r" / "run.json"
    manifest.write_text(manifest.read_text().replace('"complete": true', '"complete": false'))
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run is complete") and "nan" not in out
    assert np.loadtxt(tmp_path / "r" / "returns.csv", delimiter=",", skiprows=1).shape == (16, 4)
    assert main([*argv, "--resume"]) == 0  # now marked complete: nothing runs at all
    assert capsys.readouterr().out.startswith("run is complete")
