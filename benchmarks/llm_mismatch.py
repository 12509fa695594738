"""Does RL on the small LM degrade under a training-inference mismatch, and does each rollout
correction prevent it?

From one warm start (see llm_common.py), the same RL run (GRPO advantages, decoupled PPO clip,
token-mean, Adam 1e-3, 16 prompts x 8 responses) is repeated:

* ``reference``: float32 sampler with the current parameters (no mismatch);
* one source at a time, no correction: ``bf16_lag0`` and ``fp8_lag0`` (precision only),
  ``fp32_lag4`` (parameters 4 updates stale only);
* ``bf16_lag4``: bf16 sampler with parameters 4 updates stale, no correction;
* under the strong mismatch ``fp8_lag4`` (float8-e4m3 weights computed in bf16, 4 updates
  stale): no correction, token TIS (C=2), sequence TIS (C=2), Geo-Mask (0.9 <= rho_geo <= 1.1)
  and sample-based trust-region masking (max |log rho| <= 1, mean k3 <= 0.05).

Seeds share prompts and sampling keys across runs. Run it (about 15 minutes on 2 busy cores):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_mismatch.py
"""

from __future__ import annotations

from llm_common import parser, run_all, save, warm_start

from hyperx.llm.train import RLConfig, correction_preset

RUNS = {
    "reference": ("float32", 0, "none"),
    "bf16_lag0": ("bfloat16", 0, "none"),
    "fp8_lag0": ("float8", 0, "none"),
    "fp32_lag4": ("float32", 4, "none"),
    "bf16_lag4": ("bfloat16", 4, "none"),
    "fp8_lag4_none": ("float8", 4, "none"),
    "fp8_lag4_token_tis": ("float8", 4, "token_tis"),
    "fp8_lag4_seq_tis": ("float8", 4, "seq_tis"),
    "fp8_lag4_geo_mask": ("float8", 4, "geo_mask"),
    "fp8_lag4_trm": ("float8", 4, "trm"),
}
LR = 1e-3


def main() -> None:
    args = parser(__doc__, steps=100, seeds=2).parse_args()
    setup, task, module, params, info = warm_start(args)
    configs = {name: RLConfig(prompts_per_step=setup["prompts_per_step"], group_size=8,
                              learning_rate=LR, rollout_dtype=dtype, lag=lag,
                              correction=correction_preset(corr))
               for name, (dtype, lag, corr) in RUNS.items()}
    records, histories = run_all(module, params, task, setup, configs, args)
    save("llm_mismatch", {
        "setup": setup, "warm_start": info, "steps": args.steps, "seeds": args.seeds,
        "learning_rate": LR, "group_size": 8, "advantage": "grpo", "loss": "ppo",
        "runs": {name: {"rollout_dtype": d, "lag": k, "correction": c, **records[name]}
                 for name, (d, k, c) in RUNS.items()},
    }, histories, quick=args.quick,
        title=f"addition ({setup['difficulty']} digits): mismatch and corrections "
              f"(mean of {args.seeds} seeds)")


if __name__ == "__main__":
    main()
