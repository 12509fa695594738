"""``hyperx llm``: outputs of a tiny run, one-line argument errors, the run folder (run.json,
refusals) and Ctrl-C then ``--resume`` ending as the uninterrupted run."""

import csv
import json
import shutil

import pytest

from hyperx.commands import build_parser, main

TINY = ["llm", "--task", "addition", "--difficulty", "1", "--steps", "5", "--prompts", "2",
        "--group-size", "4", "--warmup-steps", "0", "--d-model", "32", "--layers", "1",
        "--heads", "2", "--correction", "seq_tis", "--advantage", "otb", "--lag", "1",
        "--checkpoint-every", "2", "--quiet"]
"""A tiny run: 5 RL steps in chunks of 2 with a stale (lag 1) sampler, so a cut after step 3
resumes from the checkpoint of step 2 with a parameter version in ``TrainState.lagged``."""


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted run of ``TINY`` (shared: each run compiles the RL step anew)."""
    out = tmp_path_factory.mktemp("llm") / "full"
    assert main([*TINY, "--out", str(out)]) == 0
    return out


def _untimed(path):
    """metrics.csv without the wall-clock columns (``time_*_s``), as text."""
    rows = list(csv.reader(path.read_text().splitlines()))
    keep = [i for i, name in enumerate(rows[0]) if not name.startswith("time_")]
    return "\n".join(",".join(row[i] for i in keep) for row in rows)


def test_llm_writes_metrics_summary_plot_and_run_json(full_run):
    summary = json.loads((full_run / "summary.json").read_text())
    assert summary["correction"] == "seq_tis" and summary["steps"] == 5
    assert summary["command"].startswith("hyperx llm ")
    header = (full_run / "metrics.csv").read_text().splitlines()[0].split(",")
    for col in ("step", "reward", "response_length", "mismatch_kl", "chi2_token", "ess",
                "masked_token_fraction", "grad_norm", "lr", "tokens", "tokens_total"):
        assert col in header, col
    assert len((full_run / "metrics.csv").read_text().splitlines()) == 6
    assert (full_run / "curves.png").stat().st_size > 1000
    manifest = json.loads((full_run / "run.json").read_text())
    assert manifest["command"] == "llm" and manifest["complete"] is True
    assert manifest["settings"]["checkpoint_every"] == 2 and manifest["settings"]["lag"] == 1
    assert not {"out", "resume", "overwrite", "quiet"} & set(manifest["settings"])
    assert sorted(p.name for p in (full_run / "checkpoints").iterdir()) == ["4", "5"]


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
        ["parts", "regret.csv", "regret.png", "run.json", "summary.json", "tb"])


def test_registered_in_the_hyperx_parser():
    args = build_parser().parse_args(["llm", "--out", "x"])
    assert args.command == "llm" and args.advantage == "grpo" and args.rollout_dtype == "bfloat16"


def test_ctrl_c_then_resume_ends_as_the_uninterrupted_run(full_run, tmp_path, capsys,
                                                         monkeypatch):
    """Ctrl-C after step 3 (mid-chunk): exit 130 with one line naming the checkpoint of step 2,
    the finished rows on disk, no temporary files; ``--resume`` continues from step 2 and ends
    with the metrics (bit for bit, the ``time_*`` columns aside), summary and plot of the run
    that was never cut."""
    import hyperx.llm.train as rl

    real, out = rl.train, tmp_path / "cut"

    def cut(trainer, state, key, steps, *, callback=None, timed=False):
        def stop_after_step_3(i, m):
            callback(i, m)
            written = len((out / "metrics.csv").read_text().splitlines()) - 1
            assert written == int(state.step) + i + 1  # each row is on disk as its step ends
            if written == 3:
                raise KeyboardInterrupt
        return real(trainer, state, key, steps, callback=stop_after_step_3, timed=timed)

    monkeypatch.setattr(rl, "train", cut)
    with pytest.raises(SystemExit) as err:
        main([*TINY, "--out", str(out)])
    assert err.value.code == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("hyperx: interrupted: 3 of 5 steps") and "step 2" in line
    assert "--resume" in line
    assert len((out / "metrics.csv").read_text().splitlines()) == 4
    assert json.loads((out / "run.json").read_text())["complete"] is False
    assert not [p for p in out.rglob("*") if "tmp" in p.name], list(out.rglob("*"))

    monkeypatch.setattr(rl, "train", real)
    assert main([*TINY, "--out", str(out), "--resume"]) == 0
    assert _untimed(out / "metrics.csv") == _untimed(full_run / "metrics.csv")
    timed = {"wall_s", *(k for k in json.loads((out / "summary.json").read_text())
                         if k.startswith("median_time_"))}
    got, want = (
        {k: v for k, v in json.loads((d / "summary.json").read_text().replace(str(d), "OUT"))
         .items() if k not in timed} for d in (out, full_run))
    assert got == want
    assert (out / "curves.png").read_bytes() == (full_run / "curves.png").read_bytes()
    assert json.loads((out / "run.json").read_text())["complete"] is True
    capsys.readouterr()
    assert main([*TINY, "--out", str(out), "--resume"]) == 0
    assert capsys.readouterr().out.startswith("run is complete")


@pytest.mark.parametrize(("extra", "needle"), [
    (["--resume", "--lag", "2"], "--resume: "),
    (["--lag", "2"], "--out: "),
    (["--resume", "--checkpoint-every", "3"], "--resume: "),
])
def test_other_settings_in_a_run_folder_are_refused(full_run, capsys, extra, needle):
    """``--resume`` with other settings, or a fresh run of other settings without
    ``--overwrite``, is one line naming the first differing option; nothing is touched."""
    before = {p.name: p.stat().st_mtime_ns for p in full_run.iterdir()}
    with pytest.raises(SystemExit) as err:
        main([*TINY, "--out", str(full_run), *extra])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"hyperx: error: {needle}") and f"{extra[-2]}: " in lines[0]
    assert {p.name: p.stat().st_mtime_ns for p in full_run.iterdir()} == before


def test_resume_with_metrics_cut_below_the_checkpoint_is_refused(full_run, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(full_run, out)
    (out / "run.json").write_text((out / "run.json").read_text().replace("true", "false"))
    (out / "metrics.csv").write_text("\n".join((out / "metrics.csv").read_text()
                                               .splitlines()[:3]) + "\n")
    with pytest.raises(SystemExit) as err:
        main([*TINY, "--out", str(out), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1, lines
    assert "does not hold the 5 steps of the checkpoint (it holds 2 rows)" in lines[0]


def test_resume_without_a_run_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        main([*TINY, "--out", str(tmp_path / "none"), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "holds no hyperx llm run" in lines[0]
