"""Shared set-up of the ``benchmarks/llm_*.py`` learning-curve studies (mismatch, OTB, LR schedule).

Two study tasks, each from one weak warm start and with the learning float32 reference's RL
settings (``benchmarks/llm_reference.py``: group size 8, GRPO, decoupled PPO clip 0.2,
token-mean, Adam 1e-3 with 2 full-batch epochs per batch):

* ``addition``: 2-digit addition with partial credit (responses 3-4 tokens), 64 prompts per
  step, the reference's warm start (60 supervised steps: greedy 0.375 on the held-out prompts);
* ``reverse``: reverse a 15-letter string with partial credit (responses 16 tokens with EOS),
  32 prompts per step (the CPU budget), 60 supervised steps.

Each (run, seed) is one RL run from the warm start; seed ``s`` draws the same prompts and
sampling keys in every run, so runs differ only by their config and differences are paired.
Its record (curves, summary, held-out greedy and sampled reward on 512 fixed prompts) is
cached in ``results/llm_runs/<task>/`` (``--out``) under a digest of the setup, config and step
count, so a stopped study resumes where it stopped and a run two studies share (the reference,
the uncorrected stale run) runs once. ``--quick`` shrinks everything for a smoke test (files
named ``_quick``, cache ``llm_runs_quick/``; its numbers are not results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
from atari_parity import t_interval

from hyperx.commands.llm import plot_curves, summarize
from hyperx.llm.tasks import Task
from hyperx.llm.train import (
    RLConfig,
    evaluate,
    make_policy,
    make_trainer,
    supervised_warmup,
    train,
    transformer_lms,
)

RESULTS = Path(__file__).resolve().parent / "results"
SETUP = {"task": "addition", "difficulty": 2, "reward_type": "partial", "d_model": 64,
         "num_layers": 2, "num_heads": 4, "warmup_steps": 600, "warmup_batch": 64,
         "warmup_lr": 3e-3, "prompts_per_step": 16, "eval_prompts": 512}
"""The model and task of every LLM benchmark (warm-up and RL sizes: see ``STUDIES``)."""
_RL = {"group_size": 8, "learning_rate": 1e-3, "ppo_epochs": 2}
STUDIES = {
    "addition": {**SETUP, "warmup_steps": 60, "prompts_per_step": 64, **_RL},
    "reverse": {**SETUP, "task": "reverse", "difficulty": 15, "warmup_steps": 60,
                "prompts_per_step": 32, **_RL},
}
"""Per study task: the model, the warm start and the reference's RL settings."""
QUICK = {"d_model": 32, "num_layers": 1, "num_heads": 2, "warmup_steps": 20,
         "prompts_per_step": 4, "eval_prompts": 64}
CURVE_KEYS = ("reward", "response_length", "mismatch_kl", "k3_kl", "chi2_token", "ess",
              "masked_seq_fraction", "grad_norm", "lr", "lr_scale", "update_kl",
              "zero_signal_groups", "tokens_total")


def parser(doc: str, steps: int, seeds: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--task", choices=tuple(STUDIES), default="addition")
    p.add_argument("--steps", type=int, default=steps, help="RL steps per run")
    p.add_argument("--seeds", type=int, default=seeds, help="seeds 0 .. N-1 per run")
    p.add_argument("--quick", action="store_true", help="tiny smoke test (not a result)")
    p.add_argument("--out", type=Path, default=RESULTS,
                   help="folder of the json, the png and the run cache (llm_runs/)")
    return p


def runs_dir(args: argparse.Namespace) -> Path:
    """The (run, seed) cache: ``<out>/llm_runs`` (``llm_runs_quick`` with ``--quick``)."""
    return args.out / ("llm_runs_quick" if args.quick else "llm_runs")


def study_setup(args: argparse.Namespace) -> dict:
    """The study task's setup (``--quick``: shrunk)."""
    return {**STUDIES[args.task], **(QUICK if args.quick else {})}


def base_config(setup: dict, **overrides) -> RLConfig:
    """The reference's RL settings for ``setup`` with ``overrides``."""
    return RLConfig(prompts_per_step=setup["prompts_per_step"], group_size=setup["group_size"],
                    learning_rate=setup["learning_rate"], ppo_epochs=setup["ppo_epochs"],
                    **overrides)


def held_out(lm, params, task: Task, prompts: int) -> dict[str, float]:
    """Greedy and sampled (temperature 1) mean reward on the fixed held-out prompts."""
    key = jax.random.key(999)
    return {"greedy": float(evaluate(lm, params, task, key, prompts)),
            "sampled": float(evaluate(lm, params, task, key, prompts, greedy=False))}


def warm_start(setup: dict) -> tuple[Task, object, object, dict]:
    """``(task, module, warm params, info)``: ``setup["warmup_steps"]`` supervised steps from
    the seed-0 initialisation (key 1), with the held-out rewards after them."""
    task = Task(setup["task"], setup["difficulty"], reward_type=setup["reward_type"])
    module, params = make_policy(task, d_model=setup["d_model"], num_layers=setup["num_layers"],
                                 num_heads=setup["num_heads"])
    lm = transformer_lms(module, "float32")[0]
    start = time.perf_counter()
    params, losses = supervised_warmup(lm, params, task, jax.random.key(1),
                                       steps=setup["warmup_steps"],
                                       batch_size=setup["warmup_batch"],
                                       learning_rate=setup["warmup_lr"])
    rewards = held_out(lm, params, task, setup["eval_prompts"])
    info = {"steps": setup["warmup_steps"], "warmup_s": time.perf_counter() - start,
            "final_loss": float(losses[-1]), **rewards,
            "greedy_reward_after_warmup": rewards["greedy"]}
    print(f"warm start: {info}", flush=True)
    return task, module, params, info


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent).stdout.strip()


def run_seed(trainer, module, params, task: Task, setup: dict, config: RLConfig, steps: int,
             seed: int, label: str) -> dict:
    """One RL run of ``trainer`` (built for ``config``) from the warm start: per-step curves,
    the summary with the held-out greedy and sampled reward at the end, and the seconds per
    step (the first seed's include the trainer's compilation)."""
    start = time.perf_counter()
    state, history = train(trainer, trainer.init(params), jax.random.key(seed), steps,
                           callback=lambda i, m: progress(label, seed, i, m))
    seconds = time.perf_counter() - start
    final = held_out(transformer_lms(module, "float32")[0], state.params, task,
                     setup["eval_prompts"])
    return {"seed": seed, "steps": steps, "config": repr(config), "commit": _commit(),
            "seconds": seconds, "seconds_per_step": seconds / max(steps, 1),
            "curves": {k: [h[k] for h in history] for k in CURVE_KEYS if k in history[0]},
            "summary": {**summarize(history), "greedy_reward_final": final["greedy"],
                        "sampled_reward_final": final["sampled"]}}
def run_study(module, params, task: Task, setup: dict, configs: dict[str, RLConfig],
              args: argparse.Namespace, steps: dict[str, int] | None = None
              ) -> dict[str, list[dict]]:
    """Every run of ``configs`` for seeds ``0 .. args.seeds - 1`` (``steps`` maps a run to its
    own step count, default ``args.steps``), each (run, seed) read from the cache when it ran
    before. Returns ``{run: [record of seed 0, ...]}``."""
    out: dict[str, list[dict]] = {}
    for name, config in configs.items():
        n = args.steps if steps is None else steps[name]
        digest = hashlib.sha1(json.dumps([setup, repr(config), n], sort_keys=True).encode()
                              ).hexdigest()[:12]
        out[name], trainer = [], None
        for seed in range(args.seeds):
            path = runs_dir(args) / setup["task"] / f"{digest}_seed{seed}.json"
            if path.exists():
                record = json.loads(path.read_text())
            else:
                if trainer is None:  # once per run: its seeds share the compiled parts
                    trainer = make_trainer(*transformer_lms(module, config.rollout_dtype), task,
                                           config)
                record = run_seed(trainer, module, params, task, setup, config, n, seed, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"run": name, **record}))
                tmp.replace(path)
            out[name].append(record)
            s = record["summary"]
            print(f"{name:22s} seed {seed}: reward {s['reward_first10']:.3f} -> "
                  f"{s['reward_last10']:.3f}  greedy {s['greedy_reward_final']:.3f}  sampled "
                  f"{s['sampled_reward_final']:.3f}  len {s['response_length_last10']:.2f}  "
                  f"{record['seconds_per_step']:.2f} s/step", flush=True)
    return out


INTERVAL_KEYS = ("greedy_reward_final", "sampled_reward_final", "reward_last10")
"""The measures reported with 95% Student-t intervals over seeds (and paired differences)."""


def run_record(seeds: list[dict], baselines: dict[str, list[dict]] | None = None) -> dict:
    """One run's seeds, the mean of every summary value, 95% t-intervals over seeds of the
    main measures and, against each of ``baselines`` (the same seeds of other runs), the
    paired differences ``this - baseline`` with their intervals."""
    keys = seeds[0]["summary"].keys()
    return {"seeds": seeds,
            "mean": {k: float(np.mean([s["summary"][k] for s in seeds])) for k in keys},
            "intervals": {k: t_interval([s["summary"][k] for s in seeds])
                          for k in INTERVAL_KEYS},
            "minus": {name: {k: t_interval([s["summary"][k] - b["summary"][k]
                                            for s, b in zip(seeds, base, strict=True)])
                             for k in INTERVAL_KEYS}
                      for name, base in (baselines or {}).items()},
            "seconds_per_step": float(np.mean([s["seconds_per_step"] for s in seeds]))}


def report(records: dict[str, dict]) -> None:
    """One line per run: the held-out greedy and sampled reward with intervals, and each
    paired difference."""
    fmt = lambda i: f"{i['mean']:.3f} [{i['ci95'][0]:.3f}, {i['ci95'][1]:.3f}]" if i[  # noqa: E731
        "ci95"] else f"{i['mean']:.3f}"
    for name, r in records.items():
        diffs = "  ".join(f"- {b}: greedy {fmt(d['greedy_reward_final'])}"
                          for b, d in r["minus"].items())
        print(f"{name:22s} greedy {fmt(r['intervals']['greedy_reward_final'])}  sampled "
              f"{fmt(r['intervals']['sampled_reward_final'])}  {diffs}", flush=True)


def mean_curves(histories: list[dict[str, list[float]]]) -> list[dict[str, float]]:
    """The step-wise mean over seeds of per-seed curves (for plots)."""
    n = min(len(next(iter(c.values()))) for c in histories)
    keys = histories[0].keys()
    return [{"step": i, **{k: float(np.mean([c[k][i] for c in histories])) for k in keys}}
            for i in range(n)]


def progress(name: str, seed: int, step: int, m: dict[str, float]) -> None:
    if (step + 1) % 25 == 0:
        print(f"  {name} seed {seed} step {step + 1}: reward {m['reward']:.3f} "
              f"kl {m['mismatch_kl']:.3g} len {m['response_length']:.2f}", flush=True)


def stem(name: str, args: argparse.Namespace) -> str:
    """``NAME`` for the addition study, ``NAME_reverse`` for the long one, ``_quick`` added."""
    return name + ("" if args.task == "addition" else f"_{args.task}") + (
        "_quick" if args.quick else "")


def save(name: str, payload: dict, runs: dict[str, dict], args: argparse.Namespace, *,
         title: str, x: str = "step", keys=None) -> None:
    """Write ``<out>/<stem>.json`` and ``.png`` (curves: the mean over seeds of each run)."""
    args.out.mkdir(parents=True, exist_ok=True)
    out = stem(name, args)
    payload = {**payload, "runs": runs, "seeds": args.seeds,
               "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
               "commit": _commit(),
               "machine": f"{platform.machine()} CPU, {jax.device_count()} jax device(s); "
                          "2 cores shared with other jobs",
               "jax": jax.__version__}
    (args.out / f"{out}.json").write_text(json.dumps(payload, indent=1))
    kwargs = {} if keys is None else {"keys": keys}
    plot_curves({k: mean_curves([s["curves"] for s in r["seeds"]]) for k, r in runs.items()},
                str(args.out / f"{out}.png"), title=title, x=x, **kwargs)
    print(f"wrote {args.out / out}.json and .png", flush=True)
