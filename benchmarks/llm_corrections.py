"""Cost of rollout corrections, OTB and diagnostics next to a training step; sum pi^2 two ways.

(a) Overhead. A 2-layer causal LM (d=256, V=32k) on B=8 responses of T=512 tokens: the time
of ``jax.grad`` of a policy-gradient loss (forward + backward) against the time of everything
the llm subpackage adds on the same batch: ``rollout_correction`` with four presets (token TIS,
Geo-Mask + token TIS, sample-based TRM, Seq-MIS) and their metrics, OTB advantages over groups
of N=4 with IS weights, the variance and information-bandwidth diagnostics. The OTB proxy's
``sum pi^2`` is timed twice: fused into the training forward (grad with the proxy as an aux
output, minus grad without) and standalone on stored logits (an upper bound). Target: < 5%.

(b) ``sum_v pi_v^2`` over V=32k as ``exp(logsumexp(2z) - 2 logsumexp(z))`` (float32) against a
materialised softmax: time, compiled memory (``memory_analysis``: temp / argument / output
bytes) and accuracy against float64, for float32 and bfloat16 logits.

Every function is jitted and warmed up; times are medians of repeats with block_until_ready,
and every ratio comes from one process. Run it alone on the machine:

    PYTHONPATH=. .venv/bin/python benchmarks/llm_corrections.py          # full sizes
    PYTHONPATH=. .venv/bin/python benchmarks/llm_corrections.py --quick  # smoke test
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from hyperx.llm.baselines import (
    log_prob_and_sum_sq,
    otb_advantages_from_sum_sq,
    sum_squared_probs,
    variance_diagnostics,
)
from hyperx.llm.corrections import CorrectionConfig, rollout_correction
from hyperx.llm.diagnostics import information_bandwidth
from hyperx.llm.model import CausalLM, next_token_log_probs

FULL = {"vocab": 32_000, "d_model": 256, "layers": 2, "heads": 4, "batch": 8, "seq": 512,
        "group": 4, "sum_sq_rows": 8 * 512, "repeats": 5}
QUICK = {"vocab": 4_096, "d_model": 64, "layers": 2, "heads": 4, "batch": 8, "seq": 128,
         "group": 4, "sum_sq_rows": 256, "repeats": 7}
SUM_SQ_VOCAB = 32_000
PRESETS = {
    "token_tis": CorrectionConfig.token_tis(),
    "geo_mask_token_tis": CorrectionConfig.geo_mask_token_tis(),
    "trm": CorrectionConfig.trm(),
    "seq_mis": CorrectionConfig.seq_mis(),
}


def median_seconds(calls: dict[str, tuple], repeats: int) -> dict[str, float]:
    """Median wall time of each jitted ``fn(*args)`` in ``calls = {name: (fn, args)}``.

    Two warm-up calls each, then the calls run round-robin ``repeats`` times, so a change in
    machine load hits every entry alike and the ratios between them stay fair.
    """
    for fn, args in calls.values():
        for _ in range(2):
            jax.block_until_ready(fn(*args))
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, (fn, args) in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def memory(fn, *args) -> dict[str, int]:
    """Temp / argument / output bytes of the compiled executable."""
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return {"temp_bytes": int(stats.temp_size_in_bytes),
            "argument_bytes": int(stats.argument_size_in_bytes),
            "output_bytes": int(stats.output_size_in_bytes)}


def overhead(cfg: dict, key: jax.Array) -> dict:
    b, t, v = cfg["batch"], cfg["seq"], cfg["vocab"]
    k_tok, k_init, k_len, k_rew = jax.random.split(key, 4)
    model = CausalLM(vocab_size=v, d_model=cfg["d_model"], num_layers=cfg["layers"],
                     num_heads=cfg["heads"], max_len=t + 1)
    tokens = jax.random.randint(k_tok, (b, t + 1), 0, v)
    params = model.init(k_init, tokens)
    lengths = jax.random.randint(k_len, (b, 1), t // 4, t + 1)
    mask = (jnp.arange(t)[None] < lengths).astype(jnp.float32)
    scores = jax.random.bernoulli(k_rew, 0.5, (b, 1)).astype(jnp.float32)
    rewards = scores * (jnp.arange(t)[None] == lengths - 1)

    def loss(p, adv):
        logp = next_token_log_probs(model.apply(p, tokens), tokens)
        return -jnp.sum(logp * adv * mask) / jnp.sum(mask)

    def loss_with_proxy(p, adv):
        logp, sum_sq = log_prob_and_sum_sq(model.apply(p, tokens)[:, :-1], tokens[:, 1:])
        return -jnp.sum(logp * adv * mask) / jnp.sum(mask), sum_sq

    grad = jax.jit(jax.grad(loss))
    grad_proxy = jax.jit(jax.grad(loss_with_proxy, has_aux=True))
    logits = jax.jit(model.apply)(params, tokens)
    old_lp = next_token_log_probs(logits, tokens)
    bf16_logits = jax.jit(model.clone(dtype=jnp.bfloat16).apply)(params, tokens)
    rollout_lp = next_token_log_probs(bf16_logits, tokens)
    stored_logits = logits[:, :-1]
    sum_sq = sum_squared_probs(stored_logits)
    n = cfg["group"]

    def corrections(old_lp, rollout_lp, mask, rewards, sum_sq):
        out = {name: rollout_correction(c, old_log_prob=old_lp, rollout_log_prob=rollout_lp,
                                        response_mask=mask) for name, c in PRESETS.items()}

        def grouped(x):
            return x.reshape(b // n, n, t)

        otb = otb_advantages_from_sum_sq(token_rewards=grouped(rewards),
                                         response_mask=grouped(mask), log_prob=grouped(old_lp),
                                         sum_sq=grouped(sum_sq),
                                         is_weights=grouped(out["token_tis"].weights))
        diag = variance_diagnostics(advantages=otb.advantages, returns=otb.returns,
                                    energy=otb.energy, response_mask=grouped(mask))
        bits = information_bandwidth(advantages=otb.advantages.reshape(b, t), response_mask=mask)
        return out, otb.advantages, diag, bits

    corr = jax.jit(corrections)
    proxy = jax.jit(sum_squared_probs)
    adv = jnp.ones((b, t))
    times = median_seconds({
        "fwd_bwd": (grad, (params, adv)),
        "fwd_bwd_proxy": (grad_proxy, (params, adv)),
        "corrections": (corr, (old_lp, rollout_lp, mask, rewards, sum_sq)),
        "proxy": (proxy, (stored_logits,)),
    }, cfg["repeats"])
    t_grad, t_grad_proxy = times["fwd_bwd"], times["fwd_bwd_proxy"]
    t_corr, t_proxy = times["corrections"], times["proxy"]
    metrics = corr(old_lp, rollout_lp, mask, rewards, sum_sq)[0]["token_tis"].metrics
    return {
        "fwd_bwd_s": t_grad,
        "fwd_bwd_with_fused_proxy_s": t_grad_proxy,
        "corrections_otb_diagnostics_s": t_corr,
        "sum_sq_standalone_s": t_proxy,
        "ratio_corrections": t_corr / t_grad,
        "ratio_fused_proxy": (t_grad_proxy - t_grad) / t_grad,
        "ratio_corrections_plus_fused_proxy": (t_corr + t_grad_proxy - t_grad) / t_grad,
        "ratio_corrections_plus_standalone_proxy": (t_corr + t_proxy) / t_grad,
        "bf16_vs_f32_mismatch_kl": {k: float(v) for k, v in metrics.items() if "kl" in k},
    }


def _softmax_sum_sq(z: jax.Array) -> jax.Array:
    return jnp.sum(jnp.square(jax.nn.softmax(z.astype(jnp.float32), axis=-1)), axis=-1)


def _softmax_sum_sq_native(z: jax.Array) -> jax.Array:
    return jnp.sum(jnp.square(jax.nn.softmax(z, axis=-1)), axis=-1).astype(jnp.float32)


def sum_sq_comparison(cfg: dict, key: jax.Array) -> dict:
    rows = cfg["sum_sq_rows"]
    z32 = 4.0 * jax.random.normal(key, (rows, SUM_SQ_VOCAB), jnp.float32)
    result = {"shape": [rows, SUM_SQ_VOCAB]}
    for name, z in (("float32", z32), ("bfloat16", z32.astype(jnp.bfloat16))):
        z64 = np.asarray(z[:64].astype(jnp.float32), np.float64)
        p = np.exp(z64 - z64.max(-1, keepdims=True))
        ref = ((p / p.sum(-1, keepdims=True)) ** 2).sum(-1)
        fns = {"logsumexp": sum_squared_probs, "softmax_f32": _softmax_sum_sq}
        if name == "bfloat16":
            fns["softmax_bf16_intermediates"] = _softmax_sum_sq_native
        jitted = {fn_name: jax.jit(fn) for fn_name, fn in fns.items()}
        times = median_seconds({k: (f, (z,)) for k, f in jitted.items()}, cfg["repeats"])
        entry = {}
        for fn_name, fn in fns.items():
            err = np.abs(np.asarray(jitted[fn_name](z[:64]), np.float64) - ref) / ref
            entry[fn_name] = {"time_s": times[fn_name], **memory(fn, z),
                              "max_rel_err_vs_f64": float(err.max())}
        entry["time_ratio_softmax_f32_over_logsumexp"] = (entry["softmax_f32"]["time_s"]
                                                          / entry["logsumexp"]["time_s"])
        result[name] = entry
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--out", default="benchmarks/results/llm_corrections.json")
    args = parser.parse_args()
    cfg = QUICK if args.quick else FULL
    key_a, key_b = jax.random.split(jax.random.key(0))
    start = time.perf_counter()
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": args.quick,
        "jax_version": jax.__version__,
        "device": str(jax.devices()[0].device_kind),
        "platform": jax.default_backend(),
        "config": cfg,
        "overhead": overhead(cfg, key_a),
        "sum_sq": sum_sq_comparison(cfg, key_b),
    }
    result["wall_s"] = time.perf_counter() - start
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
