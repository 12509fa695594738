"""Runs the worked example of docs/llm/index.md, so the documentation cannot rot."""

from __future__ import annotations

import math
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "llm" / "index.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _code_blocks() -> list[str]:
    return FENCE.findall(DOC.read_text())


def test_doc_has_the_worked_example():
    code = "\n".join(_code_blocks())
    for name in ("rollout_correction", "CorrectionConfig.", "otb_advantages", "policy_loss",
                 "length_aware_scale", "mean_length=", "jax.jit", "bfloat16"):
        assert name in code, f"the worked example no longer uses {name}"


def test_worked_example_runs_and_trains(capsys):
    namespace: dict = {"__name__": "worked_example"}
    exec(compile("\n".join(_code_blocks()), str(DOC), "exec"), namespace)
    history = namespace["history"]
    assert len(history) == 3
    for metrics in history:
        assert all(math.isfinite(v) for v in metrics.values()), metrics
        assert metrics["fully_masked"] == 0.0
    # The bf16 engine and the float32 trainer really disagree (a mismatch of exactly zero would
    # mean both log-probs came from the same numeric path).
    assert any(m["k3_kl"] > 0.0 for m in history)
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                         namespace["params"], namespace["init_params"])
    assert max(jax.tree.leaves(moved)) > 0.0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["iter 0", "iter 1", "iter 2"]
    assert np.isfinite(history[-1]["lr_scale"]) and 0.0 < history[-1]["lr_scale"] <= 1.0
