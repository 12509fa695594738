"""Every trainer's scalars in TensorBoard (``OUT/tb``) and, with ``--track``, Weights & Biases
(offline here: ``WANDB_MODE=offline`` writes the run under ``OUT/wandb``)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from tensorboardX.proto import event_pb2

from hyperx.commands import main
from hyperx.commands._tracking import Tracker, log_curves


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` from the TFRecord event files in ``folder``."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tracker_logs_finite_scalars_and_curves(tmp_path):
    tracker = Tracker(tmp_path, "bandit", {"steps": 3})
    tracker.log({"a": 1.5, "b": None, "c": float("nan"), "d": ""}, 7)
    tracker.close()
    assert read_scalars(tmp_path / "tb") == {"a": [(7, 1.5)]}
    log_curves(Tracker(tmp_path / "curves", "bandit", {}), "regret", [1, 10, 100],
               {"ts": [0.5, 2.0, 4.0], "ucb": [1.0, 3.0, 9.0]})
    scalars = read_scalars(tmp_path / "curves" / "tb")
    assert scalars == {"regret/ts": [(1, 0.5), (10, 2.0), (100, 4.0)],
                       "regret/ucb": [(1, 1.0), (10, 3.0), (100, 9.0)]}


def test_every_trainer_writes_tensorboard_scalars(tmp_path):
    """DeepSea per chunk, the bandit sweep's mean regret curves, games' final regret; the Atari
    and LLM runs' scalars are checked in their own CLI tests and in the terminal tests."""
    assert main(["deepsea", "--size", "4", "--seeds", "2", "--episodes", "40",
                 "--chunk-steps", "40", "--quiet", "--out", str(tmp_path / "d")]) == 0
    scalars = read_scalars(tmp_path / "d" / "tb")
    assert [step for step, _ in scalars["return_mean"]] == [40, 80, 120, 160]
    assert set(scalars) >= {"bad_fraction", "seed0/return", "seed1/return"}
    assert main(["bandit", "--dim", "3", "--arms", "4", "--steps", "20", "--seeds", "2",
                 "--agents", "uniform,linucb", "--points", "5", "--quiet",
                 "--out", str(tmp_path / "b")]) == 0
    scalars = read_scalars(tmp_path / "b" / "tb")
    assert set(scalars) == {"regret/uniform", "regret/linucb"}
    assert scalars["regret/uniform"][-1][0] == 20
    assert main(["games", "--game", "rps", "--steps", "10", "--seeds", "2", "--matchups",
                 "hedge:hedge", "--quiet", "--out", str(tmp_path / "g")]) == 0
    # TensorBoard writes a tag's ':' as '_'
    assert set(read_scalars(tmp_path / "g" / "tb")) == {"average_regret/hedge_hedge",
                                                        "nash_conv/hedge_hedge"}


def test_track_logs_to_an_offline_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "d"
    assert main(["deepsea", "--size", "4", "--seeds", "1", "--episodes", "20", "--quiet",
                 "--track", "--out", str(out)]) == 0
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list((out / "wandb").iterdir())


def test_track_without_wandb_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(SystemExit) as exc:
        main(["deepsea", "--size", "4", "--track", "--out", str(tmp_path / "d")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err == ("hyperx: error: --track: needs Weights & Biases: "
                                           "pip install 'hyperx-rl[track]'")
    assert not (tmp_path / "d").exists()
