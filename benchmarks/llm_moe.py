"""Top-K routing under RL: a small MoE policy with a bf16, stale sampler, and the remedies.

The task and RL settings are the learning float32 reference's (``benchmarks/llm_reference.py``,
``results/llm_reference.json``): 2-digit addition with partial credit, a 2-layer d=64
RoPE/RMSNorm transformer, 60 supervised warm-up steps (batch 64, Adam 3e-3) from the fixed
initialisation (seed 0), then ``RLConfig(prompts_per_step=64, group_size=8,
learning_rate=1e-3, ppo_epochs=2)`` (GRPO, decoupled PPO clip 0.2, token-mean, no rollout
correction) for ``--steps`` steps. The held-out greedy and sampled rewards of 512 fixed prompts
(float32 policy) are measured at the start and the end of each run (one ``train`` call per
run).

The MoE policy has the same d_model, layers and heads; block 0 is a dense SwiGLU MLP and the
last block (block 1) is an MoE of ``E = 4`` SwiGLU experts with Top-2 routing and Mixtral's
renormalised gates (``MoEConfig(num_experts=4, top_k=2, expert_hidden=d_model)``): two active
experts of width ``d_model`` match the dense MLP's width ``2 d_model``, so the active
parameters per token equal the dense model's. It gets its own 60-step supervised warm-up from
its own initialisation (and the soft-routing model its own, since soft routing is another
function of the same parameters); every run starts from its model's warm start, whose held-out
rewards are reported. No run adds the load-balancing loss (the warm-up has none either), so
``expert_load_max`` and ``dead_expert_fraction`` show where RL alone takes the routing.

Runs (:data:`RUNS`):

* ``dense_fp32``: the dense reference (float32 sampler, no lag): the level to keep;
* ``moe_fp32``: the MoE policy with the float32 sampler and no lag (no mismatch: its
  ``routing_flip_rollout`` is 0 but for float32 rounding between cached decoding and the full
  forward at a near-tie of two router logits);
* ``none``: the MoE policy under the mismatch: a bf16 sampler that is ``LAG = 2`` updates
  stale, no remedy;
* ``r2``, ``r3``: the same with routing replay (verl's Router Replay modes: the update replays
  ``pi_old``'s routing, or ``pi_old`` and the update both replay the sampler's);
* ``soft``: the same with soft routing (every expert weighted, softmax at temperature 1);
* ``entropy``: the same with the router-entropy bonus, ``router_entropy_coef = 0.02``. Measured
  on 4 batches at the MoE warm start, the entropy's gradient on the router weights has norm
  ~1.05 per unit coefficient and the policy loss's ~0.02, while on the whole model they are ~2.1
  and ~0.5: at 0.02 the bonus pulls the router about as hard as the reward does (so it can
  change the routing) and adds < 10% to the gradient of the rest of the model (so it cannot
  drown the policy gradient). Note that a higher router entropy brings the logits closer
  together, i.e. nearer the Top-K boundaries: whether it lowers or raises the flip rate is
  measured here, not assumed.

Per run, with 95% Student-t intervals over seeds: held-out greedy and sampled rewards at start
and end, the training reward (first and last 10 steps, and the curve), the per-step routing
diagnostics of ``hyperx.llm.train`` averaged over the run (``routing_flip_rollout``,
``routing_flip_update``, ``dead_expert_fraction``, ``router_entropy``, ``expert_load_max``,
``load_balance_loss``), the mismatch ``k3`` (``rho - 1 - log rho``, ``rho = pi_old / mu``)
token-weighted over the whole run on the rollout-flipped and on the held tokens, their paired
difference, and the flipped tokens' share of the tokens against their share of the total
``k3``: if routing flips carry the mismatch, the second share is well above the first. The
seconds per step exclude compilation and the held-out evaluations. Against ``dense_fp32``:
the paired (same seed) difference of the final held-out greedy reward.

Every finished (run, seed) is printed and written to ``OUT/llm_moe.json`` at once, so an
interrupted run keeps what it finished; ``--resume`` skips the (run, seed) pairs already in it.
``OUT/llm_moe.png``: the training reward (mean and band over seeds), the held-out greedy reward,
the flip rates and the k3 on flipped against held tokens, per run.

Cost: at the defaults (7 runs x 4 seeds x 300 steps), about 0.45 s per dense step and 0.65 s per
MoE step on 2 CPU cores shared with another job (MoE steps: every expert runs on every token),
about 1.5 h in all; up to twice that when the cores are busier (the dense reference once ran
at 1 s per step on this machine).

    PYTHONPATH=. .venv/bin/python benchmarks/llm_moe.py
    PYTHONPATH=. .venv/bin/python benchmarks/llm_moe.py --resume        # after an interruption
    PYTHONPATH=. .venv/bin/python benchmarks/llm_moe.py --quick          # smoke test, not results
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from atari_parity import t_interval
from llm_common import RESULTS, SETUP, held_out

from hyperx.llm.moe import MoEConfig
from hyperx.llm.tasks import Task
from hyperx.llm.train import (
    RLConfig,
    make_policy,
    make_trainer,
    supervised_warmup,
    train,
    transformer_lms,
)

REFERENCE_RL = dict(prompts_per_step=64, group_size=8, learning_rate=1e-3, ppo_epochs=2)
"""The learning reference's RL settings (``llm_reference.CANDIDATES["p64_lr1e-3_e2"]``)."""
LAG = 2
"""Updates of staleness of the mismatched sampler (asynchronous rollouts)."""
ENTROPY_COEF = 0.02
"""``router_entropy_coef`` of the ``entropy`` run (justified in the module docstring)."""
MISMATCH = dict(rollout_dtype="bfloat16", lag=LAG)
RUNS: dict[str, tuple[str, dict]] = {
    "dense_fp32": ("dense", dict(rollout_dtype="float32")),
    "moe_fp32": ("moe", dict(rollout_dtype="float32")),
    "none": ("moe", MISMATCH),
    "r2": ("moe", dict(MISMATCH, routing_replay="r2")),
    "r3": ("moe", dict(MISMATCH, routing_replay="r3")),
    "soft": ("soft", MISMATCH),
    "entropy": ("moe", dict(MISMATCH, router_entropy_coef=ENTROPY_COEF)),
}
"""Run name -> (model: ``dense``, ``moe`` (Top-2 of 4) or ``soft``, RLConfig settings added to
:data:`REFERENCE_RL`)."""
WARMUP_STEPS = 60
QUICK = {**SETUP, "d_model": 32, "num_layers": 1, "num_heads": 2, "eval_prompts": 64}
QUICK_RL = dict(REFERENCE_RL, prompts_per_step=8)
QUICK_WARMUP_STEPS = 20
CURVE_KEYS = ("reward", "response_length", "k3_kl", "update_kl", "routing_flip_rollout",
              "routing_flip_update", "mismatch_k3_flipped", "mismatch_k3_held",
              "dead_expert_fraction", "expert_load_max", "router_entropy")
"""Per-step metrics kept in the json (4 significant digits, one line per curve)."""
RUN_MEANS = ("routing_flip_rollout", "routing_flip_update", "dead_expert_fraction",
             "router_entropy", "expert_load_max", "load_balance_loss", "k3_kl", "mismatch_kl",
             "update_kl")
"""Per-step diagnostics summarised by their mean over a run (then an interval over seeds)."""


def moe_config(setup: dict, model: str) -> MoEConfig | None:
    """The MoE block of ``model`` (None for the dense one): 4 experts, top-2, renormalised
    gates, expert width ``d_model`` (2 active = the dense MLP's ``2 d_model``)."""
    if model == "dense":
        return None
    return MoEConfig(num_experts=4, top_k=2, expert_hidden=setup["d_model"],
                     routing="soft" if model == "soft" else "top_k")


def moe_layers(setup: dict) -> tuple[int, ...]:
    """The MoE blocks: the last one (block 0 stays dense in the 2-layer model)."""
    return (setup["num_layers"] - 1,)


def warm_start(model: str, setup: dict, warmup_steps: int) -> dict:
    """``model``'s module, float32 LM and its supervised warm start (``warmup_steps`` steps
    from the seed-0 initialisation, key 1: for ``dense`` exactly ``llm_reference``'s), with the
    held-out rewards."""
    task = Task(setup["task"], setup["difficulty"], reward_type=setup["reward_type"])
    moe = moe_config(setup, model)
    module, params = make_policy(task, d_model=setup["d_model"], num_layers=setup["num_layers"],
                                 num_heads=setup["num_heads"], moe=moe,
                                 moe_layers=None if moe is None else moe_layers(setup))
    lm = transformer_lms(module, "float32")[0]
    params, losses = supervised_warmup(lm, params, task, jax.random.key(1), steps=warmup_steps,
                                       batch_size=setup["warmup_batch"],
                                       learning_rate=setup["warmup_lr"])
    info = {"steps": warmup_steps, "final_loss": float(losses[-1]),
            **held_out(lm, params, task, setup["eval_prompts"])}
    print(f"warm start {model}: {info}", flush=True)
    return {"task": task, "module": module, "lm": lm, "params": params, "info": info}


def run_seed(trainer, warm: dict, seed: int, steps: int, eval_prompts: int) -> dict:
    """One seed of a run from ``warm``: the held-out rewards at the start and the end, the
    per-step curves, run-level routing aggregates and timing."""
    lm, task = warm["lm"], warm["task"]
    start = time.perf_counter()
    state, history = train(trainer, trainer.init(warm["params"]), jax.random.key(seed), steps,
                           timed=True)
    points = [{"step": 0, **held_out(lm, warm["params"], task, eval_prompts)},
              {"step": steps, **held_out(lm, state.params, task, eval_prompts)}]
    step_s = [m["time_sample_s"] + m["time_score_s"] + m["time_update_s"] for m in history]
    rewards = [m["reward"] for m in history]
    return {"seed": seed, "evals": points, "seconds": time.perf_counter() - start,
            "seconds_per_step": float(np.mean(step_s[1:] or step_s)),
            "train_reward_first10": float(np.mean(rewards[:10])),
            "train_reward_last10": float(np.mean(rewards[-10:])),
            **routing_aggregates(history),
            "curves": {k: [float(f"{m[k]:.4g}") for m in history]
                       for k in CURVE_KEYS if k in history[0]}}


def routing_aggregates(history: list[dict[str, float]]) -> dict[str, float]:
    """The run's means of :data:`RUN_MEANS` and, for an MoE policy, the mismatch k3
    token-weighted over the whole run on rollout-flipped and on held tokens (a step's per-token
    means weighted by its number of flipped / held tokens, so steps without flips do not count
    as zero), with the flipped tokens' share of the tokens and of the total k3."""
    out = {f"{k}_mean": float(np.mean([m[k] for m in history]))
           for k in RUN_MEANS if k in history[0]}
    if "routing_flip_rollout" not in history[0]:
        return out
    tokens = np.array([m["tokens"] for m in history])
    flipped = tokens * np.array([m["routing_flip_rollout"] for m in history])
    held = tokens - flipped
    k3_f = np.sum(flipped * np.array([m["mismatch_k3_flipped"] for m in history]))
    k3_h = np.sum(held * np.array([m["mismatch_k3_held"] for m in history]))
    out.update(k3_flipped=float(k3_f / max(flipped.sum(), 1.0)),
               k3_held=float(k3_h / max(held.sum(), 1.0)),
               flipped_token_share=float(flipped.sum() / tokens.sum()),
               flipped_k3_share=float(k3_f / max(k3_f + k3_h, 1e-30)))
    out["k3_flipped_minus_held"] = out["k3_flipped"] - out["k3_held"]
    return out


def interval(x: list[float]) -> dict:
    """Mean, values and 95% Student-t interval (None with one seed)."""
    return {"mean": float(np.mean(x)), "ci95": t_interval(x)["ci95"], "values": list(x)}


def summary(seeds: list[dict]) -> dict:
    """Intervals over seeds of every per-seed measure."""
    out = {}
    for measure in ("greedy", "sampled"):
        for where, idx in (("start", 0), ("final", -1)):
            out[f"{measure}_{where}"] = interval([s["evals"][idx][measure] for s in seeds])
    skip = {"seed", "evals", "seconds", "curves"}
    for key in (k for k in seeds[0] if k not in skip):
        out[key] = interval([s[key] for s in seeds])
    return out


def against_dense(runs: dict) -> dict:
    """Per run, the paired (same seed) difference of its final held-out greedy reward from
    ``dense_fp32``'s, with ``below_dense``: its whole 95% interval is below 0."""
    dense = {s["seed"]: s["evals"][-1]["greedy"] for s in runs["dense_fp32"]["seeds"]}
    out = {}
    for name, r in runs.items():
        diff = [s["evals"][-1]["greedy"] - dense[s["seed"]] for s in r["seeds"]
                if s["seed"] in dense]
        if name != "dense_fp32" and diff:
            ci = t_interval(diff)["ci95"]
            out[name] = {**interval(diff), "below_dense": ci is not None and ci[1] < 0}
    return out


def write(payload: dict, out: Path) -> None:
    """The json with every run's summary (and the comparison with the dense run) recomputed."""
    for r in payload["runs"].values():
        r["seeds"].sort(key=lambda s: s["seed"])
        r["summary"] = summary(r["seeds"])
    if "dense_fp32" in payload["runs"]:
        payload["greedy_final_minus_dense"] = against_dense(payload["runs"])
    text = json.dumps(payload, indent=1)
    # Lists of numbers (the curves) on one line each: a readable file 3x smaller.
    text = re.sub(r"\[\s+([-0-9.eE+,\s]+?)\s+\]",
                  lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    (out / "llm_moe.json").write_text(text)


def report(payload: dict) -> None:
    """One line per run: held-out greedy start -> final, flips, k3 flipped / held, s/step."""
    def fmt(s: dict, key: str, spec: str = ".3f") -> str:
        if key not in s:
            return "-"
        ci = s[key]["ci95"]
        return (f"{s[key]['mean']:{spec}}" if ci is None
                else f"{s[key]['mean']:{spec}} [{ci[0]:{spec}}, {ci[1]:{spec}}]")

    for name, r in payload["runs"].items():
        s = r["summary"]
        print(f"{name:10s} greedy {fmt(s, 'greedy_start')} -> {fmt(s, 'greedy_final')}  "
              f"flip rollout {fmt(s, 'routing_flip_rollout_mean')} update "
              f"{fmt(s, 'routing_flip_update_mean')}  k3 flipped {fmt(s, 'k3_flipped', '.3g')} "
              f"held {fmt(s, 'k3_held', '.3g')}  {s['seconds_per_step']['mean']:.2f} s/step",
              flush=True)
    for name, d in payload.get("greedy_final_minus_dense", {}).items():
        ci = "" if d["ci95"] is None else f" [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"
        print(f"{name:10s} greedy final - dense {d['mean']:+.3f}{ci}  below dense: "
              f"{d['below_dense']}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="RL steps per run (300; --quick 4)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0 .. N-1 (4; --quick 2)")
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=tuple(RUNS))
    p.add_argument("--out", default=None,
                   help="folder of the json and png (results/; --quick: a temporary folder)")
    p.add_argument("--resume", action="store_true",
                   help="keep the (run, seed) pairs already in OUT/llm_moe.json")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke test (1 layer, d=32, 8 prompts x 8): numbers are not results")
    args = p.parse_args()
    steps = args.steps or (4 if args.quick else 300)
    seeds = list(range(args.seeds or (2 if args.quick else 4)))
    setup = QUICK if args.quick else SETUP
    rl = QUICK_RL if args.quick else REFERENCE_RL
    warmup_steps = QUICK_WARMUP_STEPS if args.quick else WARMUP_STEPS
    out = Path(args.out or (tempfile.mkdtemp(prefix="llm_moe_quick_") if args.quick
                            else RESULTS))
    out.mkdir(parents=True, exist_ok=True)
    protocol = {"setup": {k: v for k, v in setup.items() if k not in ("warmup_steps",
                                                                      "prompts_per_step")},
                "quick": args.quick, "steps": steps, "warmup_steps": warmup_steps,
                "rl": rl, "lag": LAG, "moe": dataclasses.asdict(moe_config(setup, "moe")),
                "moe_layers": list(moe_layers(setup))}
    payload = {**protocol, "seeds": seeds, "warm_starts": {}, "runs": {}}
    path = out / "llm_moe.json"
    if args.resume and path.exists():
        old = json.loads(path.read_text())
        changed = [k for k in protocol if old.get(k) != protocol[k]]
        if changed:
            p.error(f"--resume: {path} was written with other settings: {changed}")
        payload["runs"] = old["runs"]
        payload["seeds"] = sorted(set(old["seeds"]) | set(seeds))
    payload.update(command="PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
                   machine=f"{platform.machine()} {jax.devices()[0].platform.upper()}, "
                           f"{os.cpu_count()} CPU cores shared with other jobs",
                   jax=jax.__version__)
    warm = {}
    for name in args.runs:
        model, settings = RUNS[name]
        config = RLConfig(**rl, **settings)
        record = payload["runs"].setdefault(name, {"seeds": []})
        record.update(model=model, config=repr(config))
        todo = [s for s in seeds if s not in {r["seed"] for r in record["seeds"]}]
        if model not in warm:
            warm[model] = warm_start(model, setup, warmup_steps)
            payload["warm_starts"][model] = warm[model]["info"]
        if not todo:
            continue
        w = warm[model]
        trainer = make_trainer(*transformer_lms(w["module"], config.rollout_dtype), w["task"],
                               config)
        for seed in todo:
            s = run_seed(trainer, w, seed, steps, setup["eval_prompts"])
            record["seeds"].append(s)
            write(payload, out)
            print(f"{name} seed {seed}: greedy {[round(e['greedy'], 3) for e in s['evals']]} "
                  f"sampled {[round(e['sampled'], 3) for e in s['evals']]}  "
                  f"train reward {s['train_reward_first10']:.3f} -> "
                  f"{s['train_reward_last10']:.3f}  flip rollout "
                  f"{s.get('routing_flip_rollout_mean', 0):.3f} update "
                  f"{s.get('routing_flip_update_mean', 0):.3f}  k3 flipped "
                  f"{s.get('k3_flipped', 0):.3g} held {s.get('k3_held', 0):.3g}  "
                  f"{s['seconds_per_step']:.2f} s/step ({s['seconds']:.0f} s)", flush=True)
    write(payload, out)
    report(payload)
    plot(payload, str(out / "llm_moe.png"))
    print(f"wrote {path} and {out / 'llm_moe.png'}", flush=True)


def band(ax, steps: np.ndarray, y: np.ndarray, color: str, label: str, ls: str = "-") -> None:
    """Mean over seeds (rows of ``y``) and its 95% Student-t band."""
    ax.plot(steps, y.mean(0), ls, color=color, label=label)
    if len(y) > 1:
        ci = np.array([t_interval(col)["ci95"] for col in y.T])
        ax.fill_between(steps, ci[:, 0], ci[:, 1], color=color, alpha=0.15)


def smooth(y: np.ndarray) -> np.ndarray:
    """The moving mean along the last axis (``valid`` part) over 10 steps, or a tenth of the
    run when shorter."""
    k = max(1, min(10, y.shape[-1] // 10))
    return np.stack([np.convolve(row, np.ones(k) / k, "valid") for row in y])


def plot(payload: dict, path: str) -> None:
    """Training reward (10-step mean) and held-out greedy reward with bands over seeds; the
    rollout and update flip rates; the run-wide k3 on flipped against held tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    moe_runs = [n for n, r in payload["runs"].items() if "k3_flipped" in r["summary"]]
    for i, (name, r) in enumerate(payload["runs"].items()):
        color = f"C{i}"
        reward = np.array([s["curves"]["reward"] for s in r["seeds"]])
        y = smooth(reward)
        band(axes[0], np.arange(reward.shape[1] - y.shape[1] + 1, reward.shape[1] + 1), y,
             color, name)
        steps = np.array([e["step"] for e in r["seeds"][0]["evals"]])
        band(axes[1], steps, np.array([[e["greedy"] for e in s["evals"]] for s in r["seeds"]]),
             color, name, "o-")
        if name in moe_runs:
            for key, ls in (("routing_flip_rollout", "-"), ("routing_flip_update", ":")):
                flips = smooth(np.array([s["curves"][key] for s in r["seeds"]]))
                axes[2].plot(np.arange(flips.shape[1]) + reward.shape[1] - flips.shape[1] + 1,
                             flips.mean(0), ls, color=color,
                             label=f"{name} {key.split('_')[-1]}")
    for j, name in enumerate(moe_runs):
        s = payload["runs"][name]["summary"]
        for dx, key, hatch in ((-0.2, "k3_flipped", "//"), (0.2, "k3_held", "")):
            ci = s[key]["ci95"] or [s[key]["mean"]] * 2
            axes[3].bar(j + dx, s[key]["mean"], 0.4, color=f"C{list(payload['runs']).index(name)}",
                        hatch=hatch, edgecolor="k",
                        yerr=[[s[key]["mean"] - ci[0]], [ci[1] - s[key]["mean"]]],
                        label=key if j == 0 else None)
    axes[3].set_xticks(range(len(moe_runs)), moe_runs)
    for ax, title in zip(axes, ("training reward (moving mean)", "held-out greedy reward",
                                "routing flips: rollout (-), update (:)",
                                "k3 of KL(mu || pi_old): flipped (//) vs held tokens"),
                         strict=True):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[:3]:
        ax.set_xlabel("RL step")
    for model, w in payload["warm_starts"].items():
        axes[1].axhline(w["greedy"], color="gray", ls="--", lw=0.8)
        axes[1].annotate(f"warm {model}", (0, w["greedy"]), fontsize=7, color="gray")
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=6, ncol=2)
    fig.suptitle(f"MoE (4 experts, top-2, block {payload['moe_layers']}) under RL: bf16 sampler "
                 f"{payload['lag']} updates stale (seeds {payload['seeds']}, 95% bands)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
