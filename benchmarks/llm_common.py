"""Shared set-up of the ``benchmarks/llm_*.py`` learning-curve benchmarks.

One warm start for every run of a benchmark: 2-digit addition with partial-credit rewards, a
2-layer d=64 RoPE/RMSNorm transformer, 600 supervised warm-up steps (batch 64, Adam 3e-3), so RL
starts from a policy that is right on some digits and wrong on others. ``--quick`` shrinks
everything for a smoke test (its numbers are not results).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from hyperx.llm.cli import plot_curves, summarize
from hyperx.llm.tasks import Task
from hyperx.llm.train import compare, evaluate, make_policy, supervised_warmup, transformer_lms

RESULTS = Path(__file__).resolve().parent / "results"
SETUP = {"task": "addition", "difficulty": 2, "reward_type": "partial", "d_model": 64,
         "num_layers": 2, "num_heads": 4, "warmup_steps": 600, "warmup_batch": 64,
         "warmup_lr": 3e-3, "prompts_per_step": 16, "eval_prompts": 512}
QUICK = {**SETUP, "d_model": 32, "num_layers": 1, "num_heads": 2, "warmup_steps": 100,
         "prompts_per_step": 4, "eval_prompts": 64}
CURVE_KEYS = ("reward", "response_length", "mismatch_kl", "k3_kl", "chi2_token", "ess",
              "masked_seq_fraction", "grad_norm", "lr", "tokens_total")


def parser(doc: str, steps: int, seeds: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--steps", type=int, default=steps, help="RL steps per run")
    p.add_argument("--seeds", type=int, default=seeds, help="seeds per run")
    p.add_argument("--quick", action="store_true", help="tiny smoke test (not a result)")
    return p


def warm_start(args: argparse.Namespace) -> tuple[dict, Task, object, object, dict]:
    """``(setup, task, module, warm params, info)`` with the warm-up's cost and accuracy."""
    setup = QUICK if args.quick else SETUP
    task = Task(setup["task"], setup["difficulty"], reward_type=setup["reward_type"])
    module, params = make_policy(task, d_model=setup["d_model"], num_layers=setup["num_layers"],
                                 num_heads=setup["num_heads"], seed=0)
    start = time.perf_counter()
    params, losses = supervised_warmup(transformer_lms(module, "float32")[0], params, task,
                                       jax.random.key(1), steps=setup["warmup_steps"],
                                       batch_size=setup["warmup_batch"],
                                       learning_rate=setup["warmup_lr"])
    info = {"warmup_s": time.perf_counter() - start, "warmup_final_loss": float(losses[-1]),
            "greedy_reward_after_warmup": greedy(module, params, task, setup)}
    print(f"warm start: {info}", flush=True)
    return setup, task, module, params, info


def greedy(module, params, task: Task, setup: dict) -> float:
    """Mean greedy reward of the float32 policy on a fixed held-out prompt set."""
    lm = transformer_lms(module, "float32")[0]
    return float(evaluate(lm, params, task, jax.random.key(999), setup["eval_prompts"]))


def run_record(results: list[tuple[list[dict[str, float]], object]], module, task: Task,
               setup: dict) -> dict:
    """Curves (per seed) and summaries (per seed and mean, with the final greedy reward on
    the held-out prompts) of one named run, from ``compare``'s ``[(history, state), ...]``."""
    seeds = [{"curves": {k: [h[k] for h in hist] for k in CURVE_KEYS if k in hist[0]},
              "summary": {**summarize(hist),
                          "greedy_reward_final": greedy(module, state.params, task, setup)}}
             for hist, state in results]
    keys = seeds[0]["summary"].keys()
    mean = {k: float(np.mean([s["summary"][k] for s in seeds])) for k in keys}
    return {"seeds": seeds, "mean": mean}


def run_all(module, params, task: Task, setup: dict, configs: dict, args,
            steps: dict | None = None) -> tuple[dict, dict]:
    """Run every config from the warm start for ``args.seeds`` seeds; ``steps`` maps a run to
    its own number of steps (default ``args.steps``). Returns ``(records, histories)`` and
    prints one line per run."""
    results = {}
    for name, config in configs.items():
        n = args.steps if steps is None else steps[name]
        results.update(compare(module, params, task, {name: config}, steps=n,
                               seeds=tuple(range(args.seeds)), callback=progress))
    records = {name: run_record(r, module, task, setup) for name, r in results.items()}
    for name, rec in records.items():
        m = rec["mean"]
        print(f"{name:22s} reward {m['reward_first10']:.3f} -> {m['reward_last10']:.3f}  "
              f"k3 kl {m['k3_kl_last10']:.3g}  masked seq {m['masked_seq_fraction_last10']:.2f}"
              f"  len {m['response_length_last10']:.2f}  tokens {m['tokens_total']:.0f}  "
              f"greedy {m['greedy_reward_final']:.3f}", flush=True)
    return records, {name: [h for h, _ in r] for name, r in results.items()}


def mean_curves(histories: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """The step-wise mean over seeds (for plots)."""
    n = min(len(h) for h in histories)
    keys = histories[0][0].keys()
    return [{k: float(np.mean([h[i][k] for h in histories])) for k in keys} for i in range(n)]


def progress(name: str, seed: int, step: int, m: dict[str, float]) -> None:
    if (step + 1) % 25 == 0:
        print(f"  {name} seed {seed} step {step + 1}: reward {m['reward']:.3f} "
              f"kl {m['mismatch_kl']:.3g} len {m['response_length']:.2f}", flush=True)


def save(name: str, payload: dict, runs: dict, *, quick: bool, title: str,
         x: str = "step", keys=None) -> None:
    """Write ``results/NAME.json`` and ``results/NAME.png`` (``_quick`` suffix with --quick)."""
    RESULTS.mkdir(exist_ok=True)
    stem = name + ("_quick" if quick else "")
    payload = {**payload, "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
               "machine": f"{platform.machine()} CPU, {jax.device_count()} jax device(s); "
                          "2 cores shared with other jobs",
               "jax": jax.__version__}
    (RESULTS / f"{stem}.json").write_text(json.dumps(payload, indent=1))
    kwargs = {} if keys is None else {"keys": keys}
    plot_curves({k: mean_curves(v) for k, v in runs.items()}, str(RESULTS / f"{stem}.png"),
                title=title, x=x, **kwargs)
    print(f"wrote {RESULTS / stem}.json and .png", flush=True)
