import argparse
import csv
import json

import pytest

from hyperx.bandits.registry import LEARNERS, parse_agent, parse_value, split_agents
from hyperx.commands import bandit as sweep
from hyperx.commands import main

TINY = ["--env", "linear", "--dim", "3", "--arms", "4", "--steps", "20", "--seeds", "3",
        "--agents", "exact_ts,ensemble_pp:M=2,index=sphere", "--quiet"]


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["bandit", *TINY, "--out", str(out), *extra]) == 0
    return out


def test_sweep_outputs_reproducible_and_seed_dependent(tmp_path):
    out = _run(tmp_path, "a")
    with open(out / "regret.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == sweep.CSV_COLUMNS
    assert {r["agent"] for r in rows} == {"exact_ts", "ensemble_pp"}
    assert {r["config"] for r in rows} == {"", "M=2,index=sphere"}
    assert {int(r["seed"]) for r in rows} == {0, 1, 2}
    assert max(int(r["t"]) for r in rows) == 20
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["agents"]["ensemble_pp:M=2,index=sphere"]
    assert entry["config"] == {"M": 2, "index": "sphere"}
    lo, hi = entry["final_regret"]["ci95"]
    assert lo <= entry["final_regret"]["mean"] <= hi
    assert entry["steps_per_s"] > 0 and entry["wall_time_s"] > 0
    assert summary["env_name"] == "russo" and summary["arms"] == 4
    assert (out / "regret.png").stat().st_size > 1000

    same = _run(tmp_path, "b")
    assert (same / "regret.csv").read_bytes() == (out / "regret.csv").read_bytes()
    other = _run(tmp_path, "c", "--seed", "1")
    assert (other / "regret.csv").read_bytes() != (out / "regret.csv").read_bytes()


@pytest.mark.parametrize("argv, needle", [
    (["--agents", "nope"], "agent"),
    (["--env", "nope"], "--env"),
    (["--agents", "ensemble_pp:M=0"], "index_dim"),
    (["--agents", "ensemble_pp:M=-3"], "index_dim"),
    (["--arms", "1"], "--arms"),
    (["--agents", "ensemble_pp:M"], "KEY=VALUE"),
    (["--agents", "linucb:beta=2"], "unknown option"),
    (["--agents", "exact_ts,exact_ts"], "twice"),
    (["--steps", "0"], "--steps"),
    (["--env", "digits", "--dim", "4"], "--dim"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(["bandit", *argv, "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hyperx: error: ") and err.count("\n") == 1 and needle in err
    assert not (tmp_path / "x").exists()


def test_register_adds_the_bandit_subcommand(tmp_path):
    parser = argparse.ArgumentParser(prog="hyperx")
    sweep.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bandit", "--out", str(tmp_path), "--update-every", "5"])
    assert args.func is sweep.run_from_args and args.update_every == 5 and args.env == "linear"


def test_agent_option_syntax():
    assert parse_agent("ensemble_pp:M=16,index=sphere") == ("ensemble_pp",
                                                              {"M": 16, "index": "sphere"})
    assert parse_agent("linucb:alpha=0.5:confidence=abbasi_yadkori") == (
        "linucb", {"alpha": 0.5, "confidence": "abbasi_yadkori"})
    assert split_agents("exact_ts,ensemble_pp:M=4,index=cube,linucb") == [
        "exact_ts", "ensemble_pp:M=4,index=cube", "linucb"]
    assert parse_value("true") is True and parse_value("x1") == "x1"
    assert {"exact_ts", "linucb", "ensemble_pp", "logistic_ts"} <= set(LEARNERS)


def test_interrupted_sweep_keeps_finished_parts_and_resume_completes_it(tmp_path, capsys,
                                                                        monkeypatch):
    """Killed in its third of four parts (2 agents x 2 blocks of seeds): the two finished parts
    are on disk; the same command with --resume runs only the two missing ones and ends with a
    regret.csv byte-identical to an uninterrupted run's."""
    import hyperx.bandits.runner as experiment

    full = _run(tmp_path, "full", "--seeds-per-part", "2")
    real, calls = experiment.run_bandit, []

    def flaky(*args, **kwargs):
        calls.append(kwargs["first_seed"])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(experiment, "run_bandit", flaky)
    out = tmp_path / "cut"
    with pytest.raises(SystemExit) as exc:
        main(["bandit", *TINY, "--seeds-per-part", "2", "--out", str(out)])
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("hyperx: interrupted: 2 of 4 parts") and "--resume" in err
    assert len(list((out / "parts").glob("*.csv"))) == 2 and not (out / "regret.csv").exists()

    calls.clear()
    monkeypatch.setattr(experiment, "run_bandit", real)
    assert main(["bandit", *TINY, "--seeds-per-part", "2", "--out", str(out), "--resume"]) == 0
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["agents"]) == {"exact_ts", "ensemble_pp:M=2,index=sphere"}
    capsys.readouterr()
    assert main(["bandit", *TINY, "--seeds-per-part", "2", "--out", str(out), "--resume"]) == 0
    assert capsys.readouterr().out.startswith("run is complete")


def test_out_is_checked_before_any_work(tmp_path, capsys):
    """An existing file, an empty path, an uncreatable path and a foreign non-empty directory
    fail in one line, before a learner runs; --overwrite replaces only hyperx's files."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    for out, needle in [(tmp_path / "afile", "not a directory"), ("", "expected a directory"),
                        (tmp_path / "afile" / "sub", "cannot create"),
                        (tmp_path / "foreign", "holds no hyperx run")]:
        with pytest.raises(SystemExit) as exc:
            main(["bandit", *TINY, "--out", str(out)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert main(["bandit", *TINY, "--out", str(tmp_path / "foreign"), "--overwrite"]) == 0
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"
    with pytest.raises(SystemExit):
        main(["bandit", *TINY, "--seed", "3", "--out", str(tmp_path / "foreign")])
    assert "--seed: 0 (saved) vs 3 (now)" in capsys.readouterr().err


def test_list_agents_prints_every_learner_with_its_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bandit", "--list-agents"])
    assert exc.value.code == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in LEARNERS) and "M=16" in printed


def test_damaged_part_is_reported_on_resume_with_file_line_and_fix(tmp_path, capsys):
    """A finished run whose part was cut mid-row (by a kill or a full disk outside our atomic
    writes), lost one seed's rows or its timing file: --resume exits 2 with one line naming
    the file (and the line) and saying how to recompute it, before any work and without
    leaving a temporary file; deleting the part and resuming again rebuilds the same outputs."""
    import shutil

    full = _run(tmp_path, "full", "--seeds-per-part", "2")
    part = full / "parts" / "agent00_seeds000000000-000000001.csv"
    text = part.read_text()
    lines = text.splitlines(keepends=True)
    damages = {
        "cut": ("line 21 is cut", lambda p: p.write_text(text[:len(text) // 2])),
        "cut in the last number": ("line 41 is cut", lambda p: p.write_text(text[:-4])),
        "one seed's rows removed": ("expected 40 rows, got 20",
                                    lambda p: p.write_text("".join(lines[:21]))),
        "a row cut short": ("line 3 is not the row exact_ts,,0,2,<value>",
                            lambda p: p.write_text("".join(
                                [*lines[:2], "exact_ts,,0\r\n", *lines[3:]]))),
        "timings deleted": ("agent00_seeds000000000-000000001.json: the timings",
                            lambda p: p.with_suffix(".json").unlink()),
    }
    argv = [*TINY, "--seeds-per-part", "2", "--resume"]
    for name, (needle, damage) in damages.items():
        out = tmp_path / name.replace(" ", "_").replace("'", "")
        shutil.copytree(full, out)
        damage(out / "parts" / part.name)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(["bandit", *argv, "--out", str(out)])
        err = capsys.readouterr().err
        assert exc.value.code == 2, name
        assert len(err.strip().splitlines()) == 1 and needle in err, (name, err)
        assert str(out / "parts" / part.stem) in err and "--resume" in err, err
        assert not list(out.glob(".*.tmp")), name
    (out / "parts" / part.name).unlink()
    assert main(["bandit", *argv, "--out", str(out)]) == 0
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()
