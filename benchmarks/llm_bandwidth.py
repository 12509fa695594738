"""Information bandwidth of the advantage signal, measured over training (issue 21, item 4).

A scalar advantage per response (GRPO) can tell the policy at most ``log2(B)`` bits per batch
of B responses about which response was better, however long the responses; per-token
advantages (the optimal token baseline, OTB) vary inside a response and can carry more. Both
runs start from the weak warm start of ``benchmarks/llm_reference.py`` with its reference config
(64 prompts x 8, float32 sampler, Adam 1e-3, 2 epochs), GRPO and OTB, ``--steps`` steps on
``--seeds`` seeds, and log per step (:func:`hyperx.llm.diagnostics.information_bandwidth`,
``--bins`` equal-width bins of the batch's advantage values; the default 4096 = 12 bits lies
above the ceiling log2(512) = 9 bits, which 16 bins, the trainer's default, would hide):

* ``adv_bits_per_episode``: entropy of the per-response (mean) advantage, at most
  ``min(log2 B, log2 bins)``;
* ``adv_bits_per_token``: entropy of the per-token advantage values;
* ``adv_bits_episode_bound``: ``log2 B`` of the responses with a valid token.

Writes ``results/llm_bandwidth.json`` and ``.png``.

    PYTHONPATH=. .venv/bin/python benchmarks/llm_bandwidth.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np
from atari_parity import t_interval
from llm_common import RESULTS
from llm_reference import TUNED, config, warm_start

from hyperx.llm.train import make_trainer, train

KEYS = ("adv_bits_per_episode", "adv_bits_per_token", "adv_bits_episode_bound", "reward")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--warmup-steps", type=int, default=60)
    p.add_argument("--bins", type=int, default=4096)
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args()
    task, lm, params, warm = warm_start(args.warmup_steps, 512)
    reference = config(json.loads(TUNED.read_text())["picked"])
    runs = {}
    for advantage in ("grpo", "otb"):
        trainer = make_trainer(lm, lm, task, dataclasses.replace(
            reference, advantage=advantage, bandwidth_bins=args.bins))
        seeds = []
        for seed in range(args.seeds):
            start = time.perf_counter()
            _, history = train(trainer, trainer.init(params), jax.random.key(seed), args.steps)
            seeds.append({k: [h[k] for h in history] for k in KEYS})
            print(advantage, seed, {k: round(float(np.mean(seeds[-1][k])), 3) for k in KEYS},
                  f"{time.perf_counter() - start:.0f} s", flush=True)
        means = {k: [float(np.mean(s[k])) for s in seeds] for k in KEYS}
        runs[advantage] = {
            "seeds": seeds, "mean_over_steps": {k: t_interval(v) for k, v in means.items()},
            "episode_bits_never_above_bound": all(
                e <= b + 1e-6 for s in seeds
                for e, b in zip(s["adv_bits_per_episode"], s["adv_bits_episode_bound"],
                                strict=True)),
            "token_minus_episode_bits": t_interval(
                [t - e for t, e in zip(means["adv_bits_per_token"],
                                       means["adv_bits_per_episode"], strict=True)])}
    payload = {"warm_start": warm, "steps": args.steps, "seeds": args.seeds, "bins": args.bins,
               "config": repr(reference), "runs": runs,
               "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
               "machine": f"{platform.machine()} CPU", "jax": jax.__version__}
    out = Path(args.out)
    (out / "llm_bandwidth.json").write_text(json.dumps(payload, indent=1))
    plot(payload, out / "llm_bandwidth.png")
    print("wrote", out / "llm_bandwidth.json")


def plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, (name, run) in zip(axes, payload["runs"].items(), strict=True):
        for key, colour in (("adv_bits_per_episode", "C0"), ("adv_bits_per_token", "C1"),
                            ("adv_bits_episode_bound", "k")):
            y = np.array([s[key] for s in run["seeds"]])
            for row in y:
                ax.plot(np.arange(1, y.shape[1] + 1), row, color=colour, alpha=0.35, lw=0.8)
            ax.plot(np.arange(1, y.shape[1] + 1), y.mean(0), color=colour, label=key)
        ax.axhline(np.log2(payload["bins"]), color="grey", ls=":", label="log2(bins)")
        ax.set_title(f"{name}: advantage information per batch")
        ax.set_xlabel("RL step")
    axes[0].set_ylabel("bits")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
