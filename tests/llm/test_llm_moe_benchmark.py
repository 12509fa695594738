"""``benchmarks/llm_moe.py --quick`` end to end: every run and seed reaches the json with finite
values, and ``--resume`` keeps the finished (run, seed) pairs instead of running them again."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "llm_moe.py"
RUNS = ("dense_fp32", "moe_fp32", "none", "r2", "r3", "soft", "entropy")
MOE_MEASURES = ("routing_flip_rollout_mean", "routing_flip_update_mean", "k3_flipped",
                "k3_held", "dead_expert_fraction_mean", "router_entropy_mean",
                "expert_load_max_mean")


def numbers(x):
    """Every number in a json value (None, the interval of a single seed, is skipped)."""
    if isinstance(x, dict):
        for v in x.values():
            yield from numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from numbers(v)
    elif isinstance(x, int | float) and not isinstance(x, bool):
        yield x


def run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", *args], cwd=ROOT, env=env,
                          check=True, capture_output=True, text=True, timeout=900)
    return done.stdout


@pytest.mark.slow
def test_the_quick_moe_benchmark_writes_every_run_with_finite_values(tmp_path):
    run("--out", str(tmp_path))
    payload = json.loads((tmp_path / "llm_moe.json").read_text())
    assert (tmp_path / "llm_moe.png").stat().st_size > 0
    assert set(payload["runs"]) == set(RUNS)
    assert set(payload["warm_starts"]) == {"dense", "moe", "soft"}
    assert {"command", "machine", "jax"} <= set(payload)
    for name, r in payload["runs"].items():
        assert [s["seed"] for s in r["seeds"]] == [0, 1], name
        assert all(math.isfinite(x) for x in numbers(r)), name
        assert all(len(s["curves"]["reward"]) == payload["steps"] for s in r["seeds"]), name
        if name != "dense_fp32":
            assert set(MOE_MEASURES) <= set(r["summary"]), name
    assert set(payload["greedy_final_minus_dense"]) == set(RUNS) - {"dense_fp32"}
    # Same parameters and dtype in the sampler and the trainer: no token changes experts.
    assert payload["runs"]["moe_fp32"]["summary"]["routing_flip_rollout_mean"]["mean"] == 0.0
    assert payload["runs"]["soft"]["summary"]["routing_flip_update_mean"]["mean"] == 0.0

    before = payload["runs"]
    out = run("--out", str(tmp_path), "--resume", "--runs", "dense_fp32", "r3")
    assert "seed 0:" not in out and "seed 1:" not in out
    assert json.loads((tmp_path / "llm_moe.json").read_text())["runs"] == before
