"""Does RL on the small LM degrade under a training-inference mismatch, and does each rollout
correction prevent it?

From the study task's weak warm start (llm_common.py: ``--task addition``, the learning
reference's task, or ``--task reverse``, 16-token responses), the learning float32 reference's
RL run (GRPO, decoupled PPO clip, Adam 1e-3, 2 epochs) is repeated:

* ``reference``: float32 sampler with the current parameters (no mismatch);
* one source at a time, no correction: ``fp8_lag0`` (precision only: float8-e4m3 weights
  computed in bf16) and ``fp32_lag4`` (parameters 4 updates stale only);
* under both, ``fp8_lag4``: no correction, token TIS (C=2), sequence TIS (C=2), Geo-Mask
  (0.9 <= rho_geo <= 1.1) and sample-based trust-region masking (max |log rho| <= 1, mean k3
  <= 0.05).

Seeds share prompts and sampling keys across runs, so every difference is paired. Each run
reports the held-out greedy and sampled reward after ``--steps`` with 95% t-intervals over
seeds, and its paired differences against ``reference`` and against ``fp8_lag4_none``.
Resumable (cached per run and seed; about 2.5 minutes per run and seed on addition, 1.5 on
reverse, on 2 quiet cores):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_mismatch.py --task addition
    PYTHONPATH=. .venv/bin/python benchmarks/llm_mismatch.py --task reverse
"""

from __future__ import annotations

from llm_common import (
    base_config,
    parser,
    report,
    run_record,
    run_study,
    save,
    study_setup,
    warm_start,
)

from hyperx.llm.train import correction_preset

RUNS = {
    "reference": ("float32", 0, "none"),
    "fp8_lag0": ("float8", 0, "none"),
    "fp32_lag4": ("float32", 4, "none"),
    "fp8_lag4_none": ("float8", 4, "none"),
    "fp8_lag4_token_tis": ("float8", 4, "token_tis"),
    "fp8_lag4_seq_tis": ("float8", 4, "seq_tis"),
    "fp8_lag4_geo_mask": ("float8", 4, "geo_mask"),
    "fp8_lag4_trm": ("float8", 4, "trm"),
}


def main() -> None:
    args = parser(__doc__, steps=150, seeds=4).parse_args()
    setup = study_setup(args)
    task, module, params, info = warm_start(setup)
    configs = {name: base_config(setup, rollout_dtype=dtype, lag=lag,
                                 correction=correction_preset(corr))
               for name, (dtype, lag, corr) in RUNS.items()}
    seeds = run_study(module, params, task, setup, configs, args)
    baselines = {"reference": seeds["reference"], "fp8_lag4_none": seeds["fp8_lag4_none"]}
    records = {name: {"rollout_dtype": d, "lag": k, "correction": c,
                      **run_record(seeds[name], {b: v for b, v in baselines.items()
                                                 if b != name})}
               for name, (d, k, c) in RUNS.items()}
    report(records)
    save("llm_mismatch", {"setup": setup, "warm_start": info, "steps": args.steps,
                          "learning_rate": setup["learning_rate"],
                          "group_size": setup["group_size"], "advantage": "grpo",
                          "loss": "ppo"}, records, args,
         title=f"{setup['task']} ({setup['difficulty']}): mismatch and corrections "
               f"(mean of {args.seeds} seeds)")


if __name__ == "__main__":
    main()
