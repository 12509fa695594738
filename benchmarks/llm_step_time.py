"""Wall time of one RL step split into sampling, scoring and the update, on this CPU.

``hyperx.llm.train.train(..., timed=True)`` blocks after each jitted part of a step: sampling
(KV-cache decode of ``max_new_tokens`` tokens for B = G N responses, bf16 weights), scoring
(exact rewards and the float32 teacher-forced recomputation of ``log pi_old``), and the update
(advantages, rollout correction, decoupled PPO loss, its gradient and the Adam step: one jitted
function). The first step includes compilation and is reported apart; the others give
medians. Two sizes: the learning-curve benchmarks' model and a larger one. Other engineers'
jobs share the machine's 2 cores, so times are upper bounds and vary run to run. Run it:

    PYTHONPATH=. .venv/bin/python benchmarks/llm_step_time.py
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import jax
import numpy as np
from llm_common import RESULTS

from hyperx.llm.tasks import Task
from hyperx.llm.train import (
    RLConfig,
    correction_preset,
    make_policy,
    make_trainer,
    train,
    transformer_lms,
)

SIZES = {
    "benchmark_model": {"d_model": 64, "num_layers": 2, "num_heads": 4, "difficulty": 2,
                        "prompts": 16, "group_size": 8},
    "larger": {"d_model": 256, "num_layers": 4, "num_heads": 8, "difficulty": 8,
               "prompts": 16, "group_size": 8},
}


def measure(size: dict, steps: int) -> dict:
    task = Task("addition", size["difficulty"])
    module, params = make_policy(task, d_model=size["d_model"], num_layers=size["num_layers"],
                                 num_heads=size["num_heads"])
    config = RLConfig(prompts_per_step=size["prompts"], group_size=size["group_size"],
                      advantage="otb", correction=correction_preset("seq_tis"), lag=1)
    trainer = make_trainer(*transformer_lms(module, "bfloat16"), task, config)
    start = time.perf_counter()
    _, history = train(trainer, trainer.init(params), jax.random.key(0), steps, timed=True)
    wall = time.perf_counter() - start
    parts = ("sample", "score", "update")
    med = {p: float(np.median([h[f"time_{p}_s"] for h in history[1:]])) for p in parts}
    total = sum(med.values())
    return {**size, "batch": size["prompts"] * size["group_size"],
            "max_new_tokens": task.answer_len + config.extra_tokens,
            "prompt_len": task.prompt_len, "steps": steps, "wall_s": wall,
            "first_step_s (compile included)": {p: history[0][f"time_{p}_s"] for p in parts},
            "median_s": med, "median_step_s": total,
            "fraction": {p: med[p] / total for p in parts},
            "response_tokens_per_s": float(np.median([h["tokens"] for h in history[1:]]))
            / total}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=21, help="steps per size (first compiles)")
    args = p.parse_args()
    out = {name: measure(size, args.steps) for name, size in SIZES.items()}
    for name, r in out.items():
        print(name, json.dumps({k: r[k] for k in ("median_s", "fraction", "median_step_s")}))
    RESULTS.mkdir(exist_ok=True)
    payload = {"sizes": out, "correction": "seq_tis", "advantage": "otb", "rollout": "bfloat16",
               "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
               "machine": f"{platform.machine()} CPU, 2 cores shared with other engineers' "
                          "jobs (times are upper bounds)", "jax": jax.__version__}
    (RESULTS / "llm_step_time.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {RESULTS / 'llm_step_time.json'}")


if __name__ == "__main__":
    main()
