"""``benchmarks/llm_mismatch.py``, ``llm_otb.py`` and ``llm_lr_schedule.py --quick`` end to end:
every run and seed reaches the json with finite values and intervals, and the (run, seed) cache
is shared: a run two studies hold (the float32 reference is OTB's ``grpo_n8``, the uncorrected
stale run is the schedule study's ``constant``) runs once, and a second call runs nothing."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_llm_moe_benchmark import numbers

ROOT = Path(__file__).resolve().parents[2]
STUDIES = {"llm_mismatch": 8, "llm_otb": 5, "llm_lr_schedule": 3}
"""Study -> its number of runs."""


def run(study: str, out: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{study}.py"), "--quick",
                           "--steps", "8", "--seeds", "2", "--out", str(out), *args], cwd=ROOT,
                          env=env, check=True, capture_output=True, text=True, timeout=900)
    return done.stdout


@pytest.mark.slow
def test_the_quick_studies_write_every_run_and_share_the_run_cache(tmp_path):
    cache = tmp_path / "llm_runs_quick" / "addition"
    counts = []
    for study, runs in STUDIES.items():
        run(study, tmp_path)
        payload = json.loads((tmp_path / f"{study}_quick.json").read_text())
        assert (tmp_path / f"{study}_quick.png").stat().st_size > 0
        assert len(payload["runs"]) == runs
        assert {"command", "commit", "machine", "warm_start", "setup"} <= set(payload)
        for name, r in payload["runs"].items():
            assert [s["seed"] for s in r["seeds"]] == [0, 1], name
            assert all(math.isfinite(x) for x in numbers(r)), name
            assert r["intervals"]["greedy_reward_final"]["n"] == 2, name
        counts.append(len(list(cache.glob("*.json"))))
    # mismatch: 8 runs x 2 seeds; OTB adds 4 (grpo_n8 is the reference); the schedule adds 2
    assert counts == [16, 16 + 8, 16 + 8 + 4]
    again = run("llm_lr_schedule", tmp_path)
    assert " s/step" in again and len(list(cache.glob("*.json"))) == counts[-1]
    timing = json.loads((tmp_path / "llm_lr_schedule_quick.json").read_text())["runs"]
    assert all(set(t) == {"fires_at", "reward_falls_at", "length_surge"}
               for t in timing["length_aware"]["timing"])
