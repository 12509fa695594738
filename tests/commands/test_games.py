"""``hyperx games``: outputs, reproducibility, resume after Ctrl-C, one-line errors, plot."""

import csv
import json

import pytest

from hyperx.commands import games as cli
from hyperx.commands import main

TINY = ["games", "--actions", "5", "--steps", "30", "--seeds", "4", "--points", "5",
        "--matchups", "gp_mw:random,exp3:hedge", "--quiet"]


def _run(tmp_path, name, *extra):
    out = tmp_path / name
    assert main([*TINY, "--out", str(out), *extra]) == 0
    return out


def test_outputs_are_reproducible_and_seed_dependent(tmp_path):
    out = _run(tmp_path, "a")
    with open(out / "regret.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == cli.CSV_COLUMNS
    assert {r["matchup"] for r in rows} == {"gp_mw:random", "exp3:hedge"}
    assert {(r["player"], r["learner"]) for r in rows if r["matchup"] == "exp3:hedge"} == {
        ("1", "exp3"), ("2", "hedge")}
    assert {int(r["seed"]) for r in rows} == {0, 1, 2, 3}
    assert max(int(r["t"]) for r in rows) == 30
    summary = json.loads((out / "summary.json").read_text())
    entry = summary["matchups"]["gp_mw:random"]
    assert summary["gap"] == "nash_conv" and entry["learners"] == ["gp_mw", "random"]
    final = [float(r["regret"]) / 30 for r in rows
             if r["matchup"] == "gp_mw:random" and r["player"] == "1" and r["t"] == "30"]
    assert entry["average_regret"][0]["mean"] == pytest.approx(sum(final) / 4)
    lo, hi = entry["gap"]["ci95"]
    assert 0 <= lo <= entry["gap"]["mean"] <= hi and entry["seed_rounds_per_s"] > 0
    assert (out / "regret.png").stat().st_size > 1000

    same = _run(tmp_path, "b")
    assert (same / "regret.csv").read_bytes() == (out / "regret.csv").read_bytes()
    other = _run(tmp_path, "c", "--seed", "1")
    assert (other / "regret.csv").read_bytes() != (out / "regret.csv").read_bytes()


def test_general_sum_games_report_the_cce_gap(tmp_path):
    out = tmp_path / "g"
    assert main(["games", "--game", "general_sum", "--players", "3", "--actions", "3",
                 "--steps", "20", "--seeds", "2", "--matchups", "hedge:exp3_ix:random",
                 "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gap"] == "cce_gap"
    assert len(summary["matchups"]["hedge:exp3_ix:random"]["average_regret"]) == 3


def test_sioux_falls_routing_runs_resumes_and_reports_the_delay(tmp_path, capsys):
    """The routing game: one learner for every controlled player, the mean regret over them,
    the relative delay at T beside a pure Nash equilibrium's; a second run with --resume only
    rebuilds the outputs."""
    out = tmp_path / "r"
    argv = ["games", "--game", "sioux_falls", "--controlled", "4", "--steps", "20", "--seeds",
            "3", "--points", "4", "--matchups", "hedge,exp3", "--out", str(out)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "mean R_i(T)/T" in table and "relative_delay" in table
    summary = json.loads((out / "summary.json").read_text())
    assert summary["gap"] == "relative_delay" and summary["noise"] == 0.001
    hedge, exp3 = summary["matchups"]["hedge"], summary["matchups"]["exp3"]
    assert len(hedge["average_regret"]) == 4
    assert hedge["mean_regret"]["mean"] < exp3["mean_regret"]["mean"]
    assert 5 < hedge["gap"]["mean"] < 20 and 5 < summary["equilibrium_relative_delay"] < 20
    with open(out / "regret.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["learner"] for r in rows if r["matchup"] == "exp3"} == {"exp3"}
    assert {int(r["player"]) for r in rows} == {1, 2, 3, 4}
    assert main([*argv, "--resume"]) == 0
    assert "run is complete" in capsys.readouterr().out


def test_interrupted_run_keeps_finished_parts_and_resume_completes_it(tmp_path, capsys,
                                                                     monkeypatch):
    full = _run(tmp_path, "full", "--seeds-per-part", "2")
    real, calls = cli._run_part, []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "_run_part", flaky)
    out = tmp_path / "cut"
    with pytest.raises(SystemExit) as exc:
        main([*TINY, "--seeds-per-part", "2", "--out", str(out)])
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("hyperx: interrupted: 2 of 4 parts") and "--resume" in err
    monkeypatch.setattr(cli, "_run_part", real)
    assert main([*TINY, "--seeds-per-part", "2", "--out", str(out), "--resume"]) == 0
    assert (out / "regret.csv").read_bytes() == (full / "regret.csv").read_bytes()
    capsys.readouterr()
    assert main([*TINY, "--seeds-per-part", "2", "--out", str(out), "--resume"]) == 0
    assert capsys.readouterr().out.startswith("run is complete")


@pytest.mark.parametrize("argv, needle", [
    (["--matchups", "gp_mw"], "one learner per player"),
    (["--matchups", "ucb:random"], "learner names"),
    (["--matchups", ","], "at least one"),
    (["--matchups", "exp3:random", "--steps", "10"], "Exp3.P"),
    (["--game", "rps", "--actions", "4"], "rps"),
    (["--players", "3"], "zero_sum game has 2 players"),
    (["--game", "general_sum", "--players", "1"], "--players"),
    (["--noise", "0"], "--noise"),
    (["--noise", "nan"], "--noise"),
    (["--noise", "1e-300"], "squared underflows to 0"),
    (["--actions", "100000"], "--actions"),
    (["--steps", "0"], "--steps"),
    (["--seed", "2147483647"], "--seed"),
    (["--controlled", "5"], "--controlled: only for --game sioux_falls"),
    (["--game", "sioux_falls", "--controlled", "600"], "--controlled"),
    (["--game", "sioux_falls", "--matchups", "hedge:exp3"], "one learner name"),
    (["--matchups", "hedge:random,hedge:random"], "hedge:random is given twice"),
    (["--game", "sioux_falls", "--matchups", "hedge,exp3,hedge"], "hedge is given twice"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(["games", *argv, "--out", str(tmp_path / "x")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_plot_redraws_a_games_run(tmp_path, capsys):
    out = _run(tmp_path, "p")
    (out / "regret.png").unlink()
    assert main(["plot", str(out)]) == 0
    assert (out / "regret.png").stat().st_size > 1000
