import argparse
import csv
import json

import pytest

from hyperx.bandits import sweep
from hyperx.bandits.registry import LEARNERS, parse_agent, parse_value, split_agents

TINY = ["--env", "linear", "--dim", "3", "--arms", "4", "--steps", "20", "--seeds", "3",
        "--agents", "exact_ts,ensemble_pp:M=2,index=sphere", "--quiet"]


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    assert sweep.main([*TINY, "--out", str(out), *extra]) == 0
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
        sweep.main([*argv, "--out", str(tmp_path / "x")])
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
