"""The one run-directory lifecycle (``hyperx.commands._rundir.RunDirectory``) and the part
files of runs over many seeds (``hyperx.commands._parts.Parts``), outside any command."""

import argparse
import json

import numpy as np
import pytest

from hyperx.commands._parts import Parts
from hyperx.commands._rundir import RunDirectory, read_manifest, write_summary_json
from hyperx.loop import TrainingInterrupted

OUTPUTS = ("a.csv", "summary.json", "checkpoints")


def _run(out, *, resume=False, overwrite=False, checkpointed=True, size=3):
    args = argparse.Namespace(out=str(out), resume=resume, overwrite=overwrite, track=False,
                              dry_run=False)
    return RunDirectory(args, "test", {"size": size}, OUTPUTS, extent="all 3 steps",
                        checkpointed=checkpointed)


def test_a_fresh_run_claims_the_folder_and_a_finished_one_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    run = _run(out)
    assert run.open() and not run.resumed
    assert read_manifest(out) == {**read_manifest(out), "command": "test",
                                  "settings": {"size": 3}, "complete": False}
    run.finish()
    assert read_manifest(out)["complete"] is True
    again = _run(out)
    assert again.open() is False and again.complete
    assert capsys.readouterr().out == (f"run is complete: {out} holds all 3 steps of this run; "
                                       "nothing to do (--overwrite runs it again)\n")
    assert _run(out).open(rebuild=True)  # a run of parts rebuilds from them


def test_resume_of_a_run_that_saved_no_state_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    _run(out, checkpointed=False).open()
    with pytest.raises(SystemExit) as err:
        _run(out, resume=True, checkpointed=False).open()
    assert err.value.code == 2
    assert "was run without --checkpoint" in capsys.readouterr().err
    out = tmp_path / "saved"
    _run(out).open()
    with pytest.raises(SystemExit) as err:  # checkpointed, stopped before its first save
        _run(out, resume=True).open()
    assert err.value.code == 2
    assert "holds no checkpoint" in capsys.readouterr().err
    (out / "checkpoints" / "4").mkdir(parents=True)
    run = _run(out, resume=True)
    assert run.open() and run.resumed


def test_guard_exits_130_on_ctrl_c_with_the_line_and_2_on_a_refusal(tmp_path, capsys):
    out = tmp_path / "run"
    run = _run(out)
    run.open()
    with pytest.raises(SystemExit) as err, run.guard(stopped=lambda stop: run.stopped(
            stop, unit="env step", kept="the rows are in a.csv")):
        raise TrainingInterrupted(2, 3, 1)
    assert err.value.code == 130
    assert capsys.readouterr().err.strip() == (
        f"hyperx: interrupted: after env step 2 of 3; the rows are in a.csv; the checkpoint of "
        f"env step 1 is in {out / 'checkpoints'}; rerun the same command with --resume to "
        "continue")
    with pytest.raises(SystemExit) as err, run.guard(stopped=lambda stop: run.stopped(
            stop, unit="env step", kept="nothing yet")):
        raise KeyboardInterrupt
    assert err.value.code == 130
    assert "before the first chunk; nothing yet; no checkpoint" in capsys.readouterr().err


def test_a_refused_fresh_run_leaves_nothing_and_a_resumed_one_keeps_its_files(tmp_path, capsys):
    out = tmp_path / "run"
    run = _run(out)
    run.open()
    (out / "a.csv").write_text("x\n")
    with pytest.raises(SystemExit) as err, run.guard(stopped=str):
        raise ValueError("size: too large")
    assert err.value.code == 2 and "hyperx: error: size: too large" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == []
    _run(out).open()
    (out / "a.csv").write_text("x\n")
    resumed = _run(out, resume=True, checkpointed=None)  # a run of parts
    resumed.open()
    with pytest.raises(SystemExit), resumed.guard(stopped=str):
        raise ValueError("damaged")
    assert (out / "a.csv").read_text() == "x\n" and read_manifest(out) is not None


def test_summaries_are_standard_json_with_null_for_non_finite_numbers(tmp_path):
    write_summary_json(tmp_path, {"gap": float("nan"), "best": [1.0, float("-inf")],
                                  "n": np.float32("inf"), "ok": 0.5})
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    summary = json.loads(text)
    assert (summary["gap"], summary["best"], summary["n"], summary["ok"]) == (
        None, [1.0, None], None, 0.5)


def _parts(out):
    return Parts(out, "item", 1, 3, 2, columns=("name", "seed", "value"), meta_keys=("s",))


def _rows(block):
    return [("a", seed) for seed in range(block[1], block[2])]


def test_parts_round_trip_and_name_each_kind_of_damage(tmp_path, capsys):
    parts = _parts(tmp_path)
    assert parts.blocks == [(0, 0, 2), (0, 2, 3)] and parts.todo() == parts.blocks
    for block in parts.blocks:
        parts.write(block, [(*row, 0.5 * row[1]) for row in _rows(block)], {"s": 1.0})
    assert parts.todo() == [] and parts.stopped().startswith("2 of 2 parts are in")
    rows, values, meta = parts.read((0, 0, 2), _rows((0, 0, 2)))
    assert rows == [["a", "0", "0.0"], ["a", "1", "0.5"]] and values == [0.0, 0.5]
    assert meta == {"s": 1.0}
    path = parts.path((0, 0, 2))
    text = path.read_text()
    damage = {
        "is cut": text[:-3],
        "line 3 is not the row a,1,<value>": text.replace("a,1,", "b,1,"),
        "expected 2 rows, got 1": "\n".join(text.splitlines()[:2]) + "\n",
        "expected the header name,seed,value": "x,y\n",
    }
    for needle, damaged in damage.items():
        path.write_text(damaged)
        with pytest.raises(SystemExit) as err:
            parts.read((0, 0, 2), _rows((0, 0, 2)))
        assert err.value.code == 2 and needle in capsys.readouterr().err, needle
    path.write_text(text)
    path.with_suffix(".json").unlink()
    with pytest.raises(SystemExit):
        parts.read((0, 0, 2), _rows((0, 0, 2)))
    assert "timings of item00_seeds000000000-000000001.csv are missing" in (
        capsys.readouterr().err)
    path.with_suffix(".json").write_text('{"t": 1}')
    with pytest.raises(SystemExit):
        parts.read((0, 0, 2), _rows((0, 0, 2)))
    assert "expected a JSON object with s" in capsys.readouterr().err
