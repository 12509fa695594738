"""``hyperx llm``: outputs of a tiny run and one-line argument errors."""

import json

import pytest

from hyperx.cli import build_parser, main


def test_llm_writes_metrics_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["llm", "--task", "addition", "--difficulty", "1", "--steps", "2", "--prompts",
               "2", "--group-size", "4", "--warmup-steps", "0", "--d-model", "16", "--layers",
               "1", "--heads", "2", "--correction", "seq_tis", "--advantage", "otb", "--quiet",
               "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["correction"] == "seq_tis" and summary["steps"] == 2
    assert summary["command"].startswith("hyperx llm ")
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    for col in ("step", "reward", "response_length", "mismatch_kl", "chi2_token", "ess",
                "masked_token_fraction", "grad_norm", "lr", "tokens"):
        assert col in header, col
    assert len((out / "metrics.csv").read_text().splitlines()) == 3
    assert (out / "curves.png").stat().st_size > 1000
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--correction", "magic"], "--correction"),
    (["--group-size", "0"], "--group-size"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "1e30"], "learning rate in (0, 1]"),
    (["--lr", "nan"], "--lr"),
    (["--hf-path", "/nonexistent/model"], "--hf-path"),
    (["--d-model", "30", "--heads", "4"], "--d-model"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        main(["llm", "--steps", "1", "--warmup-steps", "0", "--quiet", "--out",
              str(tmp_path / "x"), *argv])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_out_and_hf_path_are_checked_before_any_work(tmp_path, capsys):
    """A file, an empty path, a folder of foreign files or of another command's run, an empty
    model folder and a config.json that is not JSON: one line each, nothing computed."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    bandit = tmp_path / "bandit"
    assert main(["bandit", "--dim", "2", "--arms", "2", "--steps", "5", "--seeds", "1",
                 "--agents", "linucb", "--quiet", "--out", str(bandit)]) == 0
    (tmp_path / "empty_model").mkdir()
    (tmp_path / "bad_model").mkdir()
    (tmp_path / "bad_model" / "config.json").write_text("{not json")
    cases = [([str(tmp_path / "afile")], "not a directory"), ([""], "expected a directory"),
             ([str(tmp_path / "foreign")], "holds no hyperx run"),
             ([str(bandit)], "holds a hyperx bandit run"),
             ([str(tmp_path / "m1"), "--hf-path", str(tmp_path / "empty_model")], "config.json"),
             ([str(tmp_path / "m2"), "--hf-path", str(tmp_path / "bad_model")], "cannot load")]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as err:
            main(["llm", "--steps", "1", "--warmup-steps", "0", "--quiet", "--out", *argv])
        lines = capsys.readouterr().err.strip().splitlines()
        assert err.value.code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert sorted(p.name for p in bandit.iterdir()) == sorted(
        ["parts", "regret.csv", "regret.png", "run.json", "summary.json"])


def test_registered_in_the_hyperx_parser():
    args = build_parser().parse_args(["llm", "--out", "x"])
    assert args.command == "llm" and args.advantage == "grpo" and args.rollout_dtype == "bfloat16"


def test_ctrl_c_keeps_the_finished_steps(tmp_path, capsys, monkeypatch):
    import hyperx.llm.train as rl

    real = rl.train

    def cut(trainer, state, key, steps, *, callback=None, timed=False):
        def stop_after_two(i, m):
            callback(i, m)
            # Each finished step's row is already on disk.
            assert len((out / "metrics.csv").read_text().splitlines()) == i + 2
            if i == 1:
                raise KeyboardInterrupt
        return real(trainer, state, key, steps, callback=stop_after_two, timed=timed)

    monkeypatch.setattr(rl, "train", cut)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        main(["llm", "--difficulty", "1", "--steps", "5", "--prompts", "2", "--group-size", "2",
              "--warmup-steps", "0", "--d-model", "16", "--layers", "1", "--heads", "2",
              "--quiet", "--out", str(out)])
    assert err.value.code == 130
    assert "2 of 5 steps" in capsys.readouterr().err
    assert len((out / "metrics.csv").read_text().splitlines()) == 3
