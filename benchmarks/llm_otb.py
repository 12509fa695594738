"""Optimal Token Baseline with group size 4 against GRPO with 4, 8 and 16: reward per token.

The OTB paper (arXiv:2602.07078) claims that N=4 with OTB matches N=32 without it at 62-66%
fewer tokens. From one warm start (llm_common.py), each run gets the same token budget:
16 prompts per step and ``steps = base_steps * 16 / N`` steps (N=16: base_steps, N=4: four
times as many), bf16 sampler with current parameters, decoupled PPO clip, Adam 1e-3. The curves
are plotted against tokens consumed (response tokens sampled). N=32 does not fit this CPU's
budget; N=16 stands in for it. Run it (about 10 minutes on 2 busy cores):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_otb.py
"""

from __future__ import annotations

from llm_common import parser, run_all, save, warm_start

from hyperx.llm.train import RLConfig

RUNS = {"otb_n4": ("otb", 4), "grpo_n4": ("grpo", 4), "grpo_n8": ("grpo", 8),
        "grpo_n16": ("grpo", 16)}
LR = 1e-3


def main() -> None:
    args = parser(__doc__, steps=50, seeds=2).parse_args()
    setup, task, module, params, info = warm_start(args)
    steps = {name: args.steps * 16 // n for name, (_, n) in RUNS.items()}
    configs = {name: RLConfig(prompts_per_step=setup["prompts_per_step"], group_size=n,
                              learning_rate=LR, advantage=adv, rollout_dtype="bfloat16")
               for name, (adv, n) in RUNS.items()}
    records, histories = run_all(module, params, task, setup, configs, args, steps)
    save("llm_otb", {
        "setup": setup, "warm_start": info, "seeds": args.seeds, "learning_rate": LR,
        "base_steps": args.steps,
        "runs": {name: {"advantage": a, "group_size": n, "steps": steps[name], **records[name]}
                 for name, (a, n) in RUNS.items()},
    }, histories, quick=args.quick, x="tokens_total",
        keys=(("reward", "mean reward"), ("grad_norm", "gradient norm"),
              ("response_length", "response length (tokens)")),
        title=f"OTB (N=4) vs GRPO (N=4, 8, 16) at equal tokens (mean of {args.seeds} seeds)")


if __name__ == "__main__":
    main()
