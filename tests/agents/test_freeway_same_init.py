"""benchmarks/freeway_same_init.py's command line and summary (the runs themselves need the
authors' environment and hours of CPU: see the module's docstring)."""

import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import freeway_same_init  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--every", "300", "--steps", "1000"], "--every to divide --steps"),
    (["--every", "0"], "--every to divide --steps"),
    (["--steps", "200000", "--every", "1000"], "at most 100000"),
    (["--averse-share", "1.5"], "a share in \\[0, 1\\]"),
    (["--seeds", "3", "x"], "integers or 'averse'"),
    (["--seeds", "-1"], "non-negative"),
    (["--find-averse", "0"], "a positive count"),
])
def test_bad_arguments_are_refused_before_anything_runs(argv, message, monkeypatch, capsys,
                                                        tmp_path):
    monkeypatch.setattr(sys, "argv", ["freeway_same_init.py", *argv, "--out-dir",
                                      str(tmp_path / "out")])
    with pytest.raises(SystemExit):
        freeway_same_init.main()
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_the_summary_reports_each_phase_rate():
    rows = [dict(step=s, wall_s=w, q_std=[0.1, 0.2, 0.3], up_share=0.5)
            for s, w in ((0, 0.0), (1000, 10.0), (2000, 12.0), (3000, 72.0))]
    text = freeway_same_init._summary(dict(rows=rows, first_reward_step=None))
    assert "learning (after step 2000): 60.0 s per 1000 steps" in text
    assert "random (after the first measurement): 2.0 s per 1000 steps" in text
