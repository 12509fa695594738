"""The ``hyperx`` command: help without markup, the demo's sizes, ``hyperx plot DIR``."""

import csv

import pytest

from hyperx.cli import build_parser, demo_commands, main


def _subcommands():
    parser = build_parser()
    return parser, parser._subparsers._group_actions[0].choices


OWN = ("demo", "bandit", "deepsea", "plot")  # llm and atari: tests/llm, the atari tests


def test_every_subcommand_has_a_description_and_no_rst_markup():
    parser, subcommands = _subcommands()
    texts = {"hyperx": parser.format_help(),
             **{name: subcommands[name].format_help() for name in OWN}}
    for name, text in texts.items():
        assert "``" not in text and ":func:" not in text and "::" not in text, name
    for name in OWN:
        assert subcommands[name].description, f"{name} has no description"


def test_demo_steps_and_seeds_scale_all_three_parts():
    bandit, deepsea = demo_commands(1000, 2000, 20, "out")
    assert bandit[bandit.index("--seeds") + 1] == "200"
    assert deepsea[deepsea.index("--seeds") + 1] == "4"
    assert deepsea[deepsea.index("--episodes") + 1] == "400"
    bandit, deepsea = demo_commands(50, 10, 3, "out")
    assert bandit[bandit.index("--steps") + 1] == "50"
    assert bandit[bandit.index("--seeds") + 1] == "1"
    assert deepsea[deepsea.index("--episodes") + 1] == "20"


@pytest.mark.slow
def test_small_demo_runs_and_can_run_again(tmp_path, capsys):
    """Two minutes on 2 loaded cores (six learners and HyperAgent compile): slow."""
    argv = ["demo", "--steps", "20", "--seeds", "10", "--dim", "3", "--index-dim", "2",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "[3/3]" in printed and (tmp_path / "deepsea" / "deepsea.png").exists()


def test_plot_redraws_from_the_csv(tmp_path, capsys):
    bandit = tmp_path / "bandit"
    assert main(["bandit", "--dim", "3", "--arms", "4", "--steps", "10", "--seeds", "2",
                 "--agents", "uniform", "--quiet", "--out", str(bandit)]) == 0
    (bandit / "regret.png").unlink()
    assert main(["plot", str(bandit)]) == 0
    assert (bandit / "regret.png").stat().st_size > 1000
    deepsea = tmp_path / "deepsea"
    deepsea.mkdir()
    with open(deepsea / "returns.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "episode", "return", "bad"])
        writer.writerows([s, e, 0.5, 0] for e in range(1, 6) for s in (0, 1))
    assert main(["plot", str(deepsea)]) == 0
    assert (deepsea / "deepsea.png").stat().st_size > 1000
    with pytest.raises(SystemExit) as exc:
        main(["plot", str(tmp_path)])
    assert exc.value.code == 2 and "holds neither" in capsys.readouterr().err
