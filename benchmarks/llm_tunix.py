"""Tunix's GRPO learner with hyperx's rollout corrections, on CPU, against a bf16 sampler.

Setup. A Qwen3 model from Tunix's own model family (``tunix.models.qwen3``; a tiny config,
random init, nothing downloaded) is warm-started by supervised teacher forcing on the
``reverse`` task of :mod:`hyperx.llm.tasks` (15 letters, responses 16 tokens with EOS, partial
credit), then trained by Tunix's ``GRPOLearner`` (through
:class:`hyperx.llm.tunix.CorrectedGRPOLearner`, which adds the sampler's log-probs). The
trainer holds float32 weights on one host device; Tunix's vanilla sampler runs on a second
host device with the weights cast to bfloat16 (``RolloutConfig(data_type=bfloat16)``; Tunix
casts every weight sync to the rollout dtype), so ``mu != pi_old`` for real.

Conditions (every one: the same warm start, 4 seeds of sampling and prompts):

* ``none``: Tunix's ``grpo`` loss, no correction (PPO ratio against the trainer's log-probs);
* ``tunix_token_tis``: Tunix's ``grpo`` loss with ``sampler_is_weights`` by the rule of
  Tunix's agentic learner (``sampler_is="token"``, threshold 2);
* ``token_tis``, ``seq_mis``, ``geo_mask``, ``trm``: the ``"hyperx"`` loss with
  ``CorrectionConfig.token_tis()``, ``.seq_mis()``, ``.geo_mask()``, ``.trm()``.

Reported: greedy-free mean reward of the training batches per step (mean and a 95% t-interval
across seeds), the mismatch (k3 KL per token), the median step time, and the step time of
hyperx's own trainer (:mod:`hyperx.llm.train`) on a model of the same size and batch. Run it
(about 35 minutes on 2 shared cores; ``--quick`` for a smoke run) in the tunix environment:

    nice .venv-tunix/bin/python benchmarks/llm_tunix.py
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from tunix.rl import common as tunix_common  # noqa: E402
from tunix.rl import rl_cluster as rl_cluster_lib  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402

from hyperx.llm import CorrectionConfig  # noqa: E402
from hyperx.llm.tasks import Task  # noqa: E402
from hyperx.llm.tunix import (  # noqa: E402
    CorrectedGRPOConfig,
    CorrectedGRPOLearner,
    CorrectedTrainExample,
)

RESULTS = Path(__file__).resolve().parent / "results"
CONDITIONS = ("none", "tunix_token_tis", "token_tis", "seq_mis", "geo_mask", "trm")
TIS_THRESHOLD = 2.0


def correction_of(name: str) -> CorrectionConfig:
    return {"none": CorrectionConfig.disabled(), "tunix_token_tis": CorrectionConfig.disabled(),
            "token_tis": CorrectionConfig.token_tis(TIS_THRESHOLD),
            "seq_mis": CorrectionConfig.seq_mis(), "geo_mask": CorrectionConfig.geo_mask(),
            "trm": CorrectionConfig.trm()}[name]


class TaskTokenizer:
    """hyperx's character tokenizer with the methods Tunix's ``TokenizerAdapter`` asks for."""

    def __init__(self, task: Task) -> None:
        self._tok = task.tokenizer

    def encode(self, text: str, **kwargs) -> list[int]:
        return self._tok.encode(str(text))

    def decode(self, ids, **kwargs) -> str:
        return self._tok.decode(np.asarray(ids))

    def bos_id(self) -> int:
        return self._tok.bos_id

    def eos_id(self) -> int:
        return self._tok.eos_id

    def pad_id(self) -> int:
        return self._tok.pad_id


def model_config(vocab: int, size: dict, dtype=jnp.float32):
    from tunix.models.qwen3 import model as qwen3

    return qwen3.ModelConfig(dtype=dtype,
        num_layers=size["num_layers"], vocab_size=vocab, embed_dim=size["d_model"],
        hidden_dim=4 * size["d_model"], num_heads=size["num_heads"],
        head_dim=size["d_model"] // size["num_heads"], num_kv_heads=size["num_heads"],
        rope_theta=10_000, norm_eps=1e-6, use_tied_embedding=False)


def make_model(task: Task, size: dict, seed: int, mesh, dtype=jnp.float32) -> nnx.Module:
    from tunix.models.qwen3 import model as qwen3

    with jax.set_mesh(mesh):
        return qwen3.Qwen3(model_config(task.tokenizer.vocab_size, size, dtype),
                           rngs=nnx.Rngs(seed))


def warm_start(model: nnx.Module, task: Task, *, steps: int, batch: int, lr: float,
               seed: int) -> list[float]:
    """Teacher-forced cross-entropy on the answers (EOS included) through Tunix's own forward,
    ``tunix.rl.common.compute_per_token_logps``."""
    tok = task.tokenizer
    opt = nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt, prompts, answers):
        def loss_fn(model):
            graphdef, state = nnx.split(model)
            lp = tunix_common.compute_per_token_logps(
                graphdef, state, prompt_tokens=prompts, completion_tokens=answers,
                pad_id=tok.pad_id, eos_id=tok.eos_id, stop_gradient=False)
            m = (answers != tok.pad_id).astype(jnp.float32)
            return -jnp.sum(lp * m) / jnp.sum(m)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss

    losses = []
    key = jax.random.key(seed)
    for _ in range(steps):
        key, k = jax.random.split(key)
        prompts, answers = task.sample(k, batch)
        losses.append(float(step(model, opt, prompts, answers)))
    return losses


def prompt_texts(task: Task, key: jax.Array, n: int) -> list[str]:
    prompts, _ = task.sample(key, n)
    return [task.tokenizer.decode(p) for p in np.asarray(prompts)]


class TunixTokenTISLearner(CorrectedGRPOLearner):
    """Tunix's own token TIS on the plain GRPO learner: ``sampler_is_weights`` by the rule of
    Tunix's agentic learner (``AgenticGRPOConfig(sampler_is="token")``:
    ``min(exp(clip(log pi_old - log mu, -20, 20)), threshold)`` at completion tokens), read by
    Tunix's ``grpo_loss_fn``."""

    def _correct(self, example, rollout_output, rewards) -> CorrectedTrainExample:
        out = super()._correct(example, rollout_output, rewards)
        log_ratio = jnp.clip(out.old_per_token_logps - out.rollout_per_token_logps, -20.0, 20.0)
        weights = jnp.minimum(jnp.exp(log_ratio), TIS_THRESHOLD) * out.completion_mask
        return out.replace(sampler_is_weights=jax.lax.stop_gradient(weights))


def run_condition(name: str, seed: int, warm_state, task: Task, size: dict, args, meshes
                  ) -> dict:
    actor_mesh, rollout_mesh = meshes
    model = make_model(task, size, 0, actor_mesh)
    nnx.update(model, warm_state)
    batch = args.prompts
    max_tokens = task.answer_len + 2
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={rl_cluster_lib.Role.ACTOR: actor_mesh,
                      rl_cluster_lib.Role.REFERENCE: actor_mesh,
                      rl_cluster_lib.Role.ROLLOUT: rollout_mesh},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=optax.chain(optax.clip_by_global_norm(1.0), optax.adam(args.lr)),
            eval_every_n_steps=10**9, max_steps=args.steps),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=max_tokens, max_prompt_length=task.prompt_len,
            kv_cache_size=task.prompt_len + max_tokens + 8, temperature=1.0, top_p=1.0,
            top_k=None, return_logprobs=True, data_type=jnp.bfloat16,
            eos_tokens=[task.tokenizer.eos_id], seed=jax.random.key(seed)))
    cluster = rl_cluster_lib.RLCluster(actor=model, reference=None,
                                       tokenizer=TaskTokenizer(task),
                                       cluster_config=cluster_config)
    if args.sampler_compute == "bfloat16":
        # Tunix's vanilla rollout casts the weights to RolloutConfig.data_type but computes in
        # the model config's dtype; an inference engine computes in bf16 too, so the sampler
        # gets the graph of the same Qwen3 with dtype bfloat16 (same parameters).
        sampler = cluster.rollout._sampler  # noqa: SLF001
        sampler._transformer_graphdef = nnx.graphdef(  # noqa: SLF001
            make_model(task, size, 0, rollout_mesh, jnp.bfloat16))
    tunix_loss = name in ("none", "tunix_token_tis")
    algo = CorrectedGRPOConfig(
        num_generations=args.group, num_iterations=1, beta=0.0, epsilon=0.2,
        loss_agg_mode="sequence-mean-token-mean",
        policy_loss_fn="grpo" if tunix_loss else "hyperx", correction=correction_of(name))
    history: list[dict] = []

    def reward_fn(prompts, completions, **kwargs):
        return [task.reward_text(p, c) for p, c in zip(prompts, completions, strict=True)]

    learner_cls = TunixTokenTISLearner if name == "tunix_token_tis" else CorrectedGRPOLearner
    learner = learner_cls(cluster, algo, [reward_fn])
    inner_correct = learner._correct

    def recording_correct(example, rollout_output, rewards):
        out = inner_correct(example, rollout_output, rewards)
        r = np.asarray(rewards, np.float64)
        m = learner.last_correction_metrics
        history.append({"reward": float(r.mean()), "exact": float(np.mean(r == 1.0)),
                        "k3_kl": m.get("k3_kl", float("nan")),
                        "masked_seq_fraction": m.get("masked_seq_fraction", 0.0),
                        "time": time.perf_counter()})
        return out

    learner._correct = recording_correct
    key = jax.random.key(1000 + seed)
    data = []
    for _ in range(args.steps):
        key, k = jax.random.split(key)
        data.append({"prompts": np.array(prompt_texts(task, k, batch))})
    start = time.perf_counter()
    learner.train(data)
    wall = time.perf_counter() - start
    times = np.diff([h["time"] for h in history])
    return {"condition": name, "seed": seed, "wall_s": wall,
            "median_step_s": float(np.median(times[1:])) if len(times) > 1 else float("nan"),
            "reward": [h["reward"] for h in history], "exact": [h["exact"] for h in history],
            "k3_kl": [h["k3_kl"] for h in history],
            "masked_seq_fraction": [h["masked_seq_fraction"] for h in history]}


def hyperx_step_time(task: Task, size: dict, args) -> dict:
    """hyperx's own trainer (``hyperx.llm.train``) at the same size, batch and bf16 sampler."""
    from hyperx.llm.train import RLConfig, make_policy, make_trainer, train, transformer_lms

    module, params = make_policy(task, d_model=size["d_model"], num_layers=size["num_layers"],
                                 num_heads=size["num_heads"])
    config = RLConfig(prompts_per_step=args.prompts, group_size=args.group,
                      correction=CorrectionConfig.token_tis(TIS_THRESHOLD))
    trainer = make_trainer(*transformer_lms(module, "bfloat16"), task, config)
    steps = min(args.steps, 12)
    _, history = train(trainer, trainer.init(params), jax.random.key(0), steps, timed=True)
    per = [sum(h[f"time_{p}_s"] for p in ("sample", "score", "update")) for h in history[1:]]
    return {"median_step_s": float(np.median(per)), "steps": steps,
            "first_step_s": sum(history[0][f"time_{p}_s"] for p in ("sample", "score", "update"))}


def interval(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds (axis 0) and the half-width of a 95% t-interval."""
    from scipy import stats

    n = rows.shape[0]
    mean = rows.mean(axis=0)
    if n < 2:
        return mean, np.zeros_like(mean)
    half = stats.t.ppf(0.975, n - 1) * rows.std(axis=0, ddof=1) / np.sqrt(n)
    return mean, half


def summarise(runs: list[dict], last: int) -> dict:
    out = {}
    for name in CONDITIONS:
        rs = [r for r in runs if r["condition"] == name]
        if not rs:
            continue
        rewards = np.array([r["reward"] for r in rs])
        final = rewards[:, -last:].mean(axis=1)
        mean, half = interval(final[:, None])
        first = rewards[:, :last].mean(axis=1)
        whole = rewards.mean(axis=1)  # the area under each seed's curve, per step
        whole_mean, whole_half = interval(whole[:, None])
        out[name] = {
            "seeds": len(rs),
            f"reward_first_{last}": float(first.mean()),
            f"reward_last_{last}": float(mean[0]), f"reward_last_{last}_ci95": float(half[0]),
            "reward_all_steps": float(whole_mean[0]),
            "reward_all_steps_ci95": float(whole_half[0]),
            "reward_min_per_seed": [float(x) for x in rewards.min(axis=1)],
            "k3_kl_max_per_seed": [float(np.nanmax(r["k3_kl"])) for r in rs],
            "exact_last": float(np.array([r["exact"] for r in rs])[:, -last:].mean()),
            "k3_kl_mean": float(np.nanmean([r["k3_kl"] for r in rs])),
            "masked_seq_fraction_mean": float(np.mean([r["masked_seq_fraction"] for r in rs])),
            "median_step_s": float(np.median([r["median_step_s"] for r in rs])),
        }
    return out


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, kx) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True,
                                 gridspec_kw={"height_ratios": [2, 1]})
    for name in CONDITIONS:
        rs = [r for r in runs if r["condition"] == name]
        if not rs:
            continue
        rows = np.array([r["reward"] for r in rs])
        mean, half = interval(rows)
        x = np.arange(1, rows.shape[1] + 1)
        style = "--" if name == "tunix_token_tis" else "-"
        ax.plot(x, mean, style, label=name)
        ax.fill_between(x, mean - half, mean + half, alpha=0.12)
        kx.semilogy(x, np.nanmean([r["k3_kl"] for r in rs], axis=0), style, label=name)
    ax.set_ylabel("mean batch reward (partial credit)")
    ax.set_title("reverse-15, Qwen3-tiny, bf16 sampler vs fp32 trainer\n"
                 "mean over seeds, 95% t-interval")
    ax.legend(fontsize=8)
    kx.set_xlabel("GRPO step (Tunix learner)")
    kx.set_ylabel("k3 KL(pi_old, mu) per token")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt")
    parser.add_argument("--warmup-steps", type=int, default=120)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--sampler-compute", choices=("bfloat16", "float32"),
                        default="bfloat16", help="the sampler's activation dtype (its weights "
                        "are bf16 either way)")
    parser.add_argument("--quick", action="store_true", help="smoke run (tiny sizes)")
    parser.add_argument("--out", default=str(RESULTS / "llm_tunix"))
    parser.add_argument("--summarise-only", action="store_true",
                        help="recompute the summary and the figure of --out's JSON (no runs)")
    args = parser.parse_args(argv)
    if args.summarise_only:
        out = Path(args.out)
        result = json.loads(out.with_suffix(".json").read_text())
        steps = result["setup"]["steps"]
        result["summary"] = summarise(result["runs"], max(1, min(5, steps // 3)))
        out.with_suffix(".json").write_text(json.dumps(result, indent=1))
        plot(result["runs"], out.with_suffix(".png"))
        print(json.dumps(result["summary"], indent=1))
        return result
    size = {"d_model": 64, "num_layers": 2, "num_heads": 4}
    difficulty = 15
    if args.quick:
        size = {"d_model": 32, "num_layers": 1, "num_heads": 2}
        difficulty = 3
    task = Task("reverse", difficulty, reward_type="partial")
    devices = jax.devices()
    if len(devices) < 2:
        raise RuntimeError("expected two host devices (XLA_FLAGS device count 2)")
    meshes = tuple(jax.sharding.Mesh(np.array([d]).reshape(1, 1), ("fsdp", "tp"))
                   for d in devices[:2])
    start = time.perf_counter()
    model = make_model(task, size, 0, meshes[0])
    losses = warm_start(model, task, steps=args.warmup_steps, batch=64, lr=3e-3, seed=1)
    warm_state = nnx.state(model, nnx.Param)
    warm_s = time.perf_counter() - start
    print(f"warm start: {args.warmup_steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f} "
          f"({warm_s:.0f} s)", flush=True)
    runs = []
    for name in args.conditions.split(","):
        for seed in range(args.seeds):
            r = run_condition(name, seed, warm_state, task, size, args, meshes)
            runs.append(r)
            print(f"{name:16s} seed {seed}: reward {np.mean(r['reward'][:3]):.3f} -> "
                  f"{np.mean(r['reward'][-3:]):.3f}  k3 {np.nanmean(r['k3_kl']):.2e}  "
                  f"step {r['median_step_s']:.2f} s  ({r['wall_s']:.0f} s)", flush=True)
    hyperx_time = hyperx_step_time(task, size, args)
    last = max(1, min(5, args.steps // 3))
    result = {
        "command": "nice .venv-tunix/bin/python benchmarks/llm_tunix.py"
                   + (" --quick" if args.quick else ""),
        "setup": {"task": "reverse", "difficulty": difficulty, "reward_type": "partial",
                  "model": "tunix.models.qwen3 (random init)", **size,
                  "warmup_steps": args.warmup_steps, "warmup_loss": [losses[0], losses[-1]],
                  "steps": args.steps, "seeds": args.seeds, "prompts_per_step": args.prompts,
                  "group_size": args.group, "lr": args.lr, "sampler": "bfloat16 weights",
                  "sampler_compute": args.sampler_compute, "trainer": "float32",
                  "loss_agg_mode": "sequence-mean-token-mean",
                  "tis_threshold": TIS_THRESHOLD},
        "versions": {m: __import__(m).__version__ for m in ("jax", "flax", "optax")}
        | {"google-tunix": _version("google-tunix"), "python": platform.python_version()},
        "summary": summarise(runs, last),
        "hyperx_trainer_step": hyperx_time,
        "total_s": time.perf_counter() - start,
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    plot(runs, out.with_suffix(".png"))
    print(json.dumps(result["summary"], indent=1))
    print(f"hyperx trainer step {hyperx_time['median_step_s']:.3f} s; wrote {out}.json/.png")
    return result


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main()
