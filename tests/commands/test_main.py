"""The ``hyperx`` command: help without markup, the demo's sizes, ``hyperx plot DIR``."""

import csv

import pytest

from hyperx.commands import build_parser, main
from hyperx.commands.demo import demo_commands


def _subcommands():
    parser = build_parser()
    return parser, parser._subparsers._group_actions[0].choices


COMMANDS = ("demo", "bandit", "deepsea", "atari", "games", "llm", "plot")


def test_every_subcommand_has_a_description_and_no_rst_markup():
    parser, subcommands = _subcommands()
    assert set(subcommands) == set(COMMANDS)
    texts = {"hyperx": parser.format_help(),
             **{name: subcommands[name].format_help() for name in COMMANDS}}
    for name, text in texts.items():
        assert "``" not in text and ":func:" not in text and ":mod:" not in text, name
    for name in COMMANDS:
        assert subcommands[name].description, f"{name} has no description"


def test_help_shows_every_default():
    """Each option with a default says it (``(default: ...)``), as argparse users expect."""
    _, subcommands = _subcommands()
    for name in COMMANDS:
        for action in subcommands[name]._actions:
            if action.option_strings and action.default not in (None, False, "==SUPPRESS=="):
                help_text = subcommands[name]._get_formatter()._expand_help(action)
                assert "default" in help_text, (name, action.option_strings, help_text)
    text = " ".join(subcommands["deepsea"].format_help().split())
    assert "DeepSea size N (default: 20)" in text
    text = " ".join(subcommands["llm"].format_help().split())
    assert "(default: 600)" in text and "RL steps (default: 300)" in text
    assert "env steps per seed (default: 100000)" in " ".join(
        subcommands["atari"].format_help().split())


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("hyperx 0.1.0 (Python ") and "jax " in line, line


@pytest.mark.parametrize("argv, message", [
    (["atari", "--game", "pong"], None),  # any case
    (["atari", "--game", "Pongg"], "--game: expected an Atari game"),
    (["atari", "--agent", "ppo"], "argument --agent: invalid choice: 'ppo'"),
    (["atari", "--backend", "gym"], "argument --backend: invalid choice: 'gym'"),
    (["bandit", "--env", "lineer"], "argument --env: invalid choice: 'lineer'"),
])
def test_closed_sets_are_choices_and_games_match_any_case(argv, message, tmp_path, capsys):
    full = [*argv, "--out", str(tmp_path / "run"), "--dry-run"]
    if message is None:
        assert main([*full, "--agent", "dqn_100k"]) == 0
        assert "hyperx atari --dry-run" in capsys.readouterr().out
        return
    with pytest.raises(SystemExit) as exc:
        main(full)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and message in err and len(err.splitlines()) == 1, err
    if "Pongg" in argv:
        assert err.endswith("did you mean Pong?"), err


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
    assert exc.value.code == 2 and "holds no run to plot" in capsys.readouterr().err


def test_plot_redraws_atari_and_llm_runs(tmp_path):
    atari = tmp_path / "atari"
    atari.mkdir()
    (atari / "episodes.csv").write_text("seed,env,env_step,score,length\n"
                                        + "".join(f"0,0,{t},{t % 7}.0,90\n"
                                                  for t in range(100, 3000, 100)))
    (atari / "evaluations.csv").write_text("seed,env_step,score\n0,1500,3.0\n0,3000,5.0\n")
    assert main(["plot", str(atari)]) == 0
    assert (atari / "returns.png").stat().st_size > 1000
    llm = tmp_path / "llm"
    llm.mkdir()
    columns = ["reward", "response_length", "mismatch_kl", "grad_norm", "ess", "lr"]
    rows = [",".join([str(i), *(str(0.1 * i) for _ in columns)]) for i in range(1, 9)]
    (llm / "metrics.csv").write_text("\n".join([",".join(["step", *columns]), *rows]) + "\n")
    assert main(["plot", str(llm)]) == 0
    assert (llm / "curves.png").stat().st_size > 1000
    (llm / "metrics.csv").write_text("step,reward\n1,abc\n")
    with pytest.raises(SystemExit) as exc:
        main(["plot", str(llm)])
    assert exc.value.code == 2
