"""Optimal Token Baseline with group size 4 against GRPO with 4, 8, 16 and 32 at equal tokens.

The OTB paper (arXiv:2602.07078) claims that N=4 with OTB matches N=32 without it at 62-66%
fewer tokens. From the study task's weak warm start (llm_common.py, ``--task addition`` or
``--task reverse``), each run gets the same token budget: the reference's prompts per step and
``steps = base_steps * 8 / N`` steps (N=8: ``--steps``, N=4 twice as many, N=32 a quarter),
float32 sampler with current parameters, the learning reference's RL settings. The held-out
greedy and sampled rewards after the budget carry 95% t-intervals over seeds and paired
differences against ``grpo_n4`` and ``grpo_n32``; the curves are plotted against tokens
consumed. Resumable (cached per run and seed):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_otb.py --task addition
    PYTHONPATH=. .venv/bin/python benchmarks/llm_otb.py --task reverse
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

RUNS = {"otb_n4": ("otb", 4), "grpo_n4": ("grpo", 4), "grpo_n8": ("grpo", 8),
        "grpo_n16": ("grpo", 16), "grpo_n32": ("grpo", 32)}


def main() -> None:
    args = parser(__doc__, steps=150, seeds=4).parse_args()
    setup = study_setup(args)
    task, module, params, info = warm_start(setup)
    steps = {name: args.steps * 8 // n for name, (_, n) in RUNS.items()}
    configs = {name: base_config({**setup, "group_size": n}, advantage=adv,
                                 rollout_dtype="float32")
               for name, (adv, n) in RUNS.items()}
    seeds = run_study(module, params, task, setup, configs, args, steps)
    records = {name: {"advantage": a, "group_size": n, "steps": steps[name],
                      **run_record(seeds[name], {b: seeds[b] for b in ("grpo_n4", "grpo_n32")
                                                 if b != name})}
               for name, (a, n) in RUNS.items()}
    report(records)
    save("llm_otb", {"setup": setup, "warm_start": info, "base_steps": args.steps,
                     "learning_rate": setup["learning_rate"]}, records, args, x="tokens_total",
         keys=(("reward", "mean reward"), ("grad_norm", "gradient norm"),
               ("response_length", "response length (tokens)")),
         title=f"OTB (N=4) vs GRPO (N=4..32) at equal tokens (mean of {args.seeds} seeds)")


if __name__ == "__main__":
    main()
