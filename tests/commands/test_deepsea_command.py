import csv
import json

import pytest

from hyperx.commands import main


def test_deepsea_command_writes_returns_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["deepsea", "--size", "3", "--agent", "dqn", "--seeds", "2", "--episodes", "40",
                 "--out", str(out), "--quiet"]) == 0
    with open(out / "returns.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 40
    assert set(rows[0]) == {"seed", "episode", "return", "bad"}
    assert {r["seed"] for r in rows} == {"0", "1"}
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["learned_episode_bsuite"]) == 2
    assert len(summary["learned_episode_running_mean"]) == 2
    assert "exact" in summary["criteria"]["learned_episode_bsuite"]
    assert summary["env_steps_per_s"] > 0 and summary["wall_time_s"] > 0
    assert (out / "deepsea.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "bsuite's criterion (#bad / #episodes < 0.9, exact crossing)" in printed
    assert "running mean" in printed and "by chance" in printed


@pytest.mark.parametrize("argv", [
    ["deepsea", "--agent", "rainbow", "--out", "x"],
    ["deepsea", "--size", "0", "--out", "x"],
    ["deepsea", "--seeds", "0", "--out", "x"],
    ["deepsea", "--size", "4"],
])
def test_deepsea_command_rejects_bad_arguments_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("hyperx: error: ") and err.count("\n") == 1
