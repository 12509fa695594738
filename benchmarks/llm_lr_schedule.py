"""Constant learning rate against the length-aware schedule under the training-inference mismatch.

The run that degrades in llm_mismatch.py (float8 sampler, parameters 4 updates stale, no
correction, Adam 1e-3) is repeated with ``lr_schedule="length_aware"``
(:func:`hyperx.llm.schedules.length_aware_scale`; the rule is ours, the idea is
arXiv:2602.01826). Responses here are 3-4 tokens long, so a surge is a few percent: the
surge threshold is lowered to ``fast/slow EMA > 1.03`` for 3 steps (default 1.15), each
trigger halves the step size down to 0.1 of it; a second variant also tracks the mismatch KL
(``kl_threshold=1.5``). Run it (about 6 minutes on 2 busy cores):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_lr_schedule.py
"""

from __future__ import annotations

from llm_common import parser, run_all, save, warm_start

from hyperx.llm.train import RLConfig

LENGTH = (("threshold", 1.03), ("window", 3), ("warmup_steps", 10), ("factor", 0.5),
          ("min_scale", 0.1))
RUNS = {"constant": ("constant", ()), "length_aware": ("length_aware", LENGTH),
        "length_and_kl_aware": ("length_aware", LENGTH + (("kl_threshold", 1.5),))}
LR = 1e-3


def main() -> None:
    args = parser(__doc__, steps=100, seeds=2).parse_args()
    setup, task, module, params, info = warm_start(args)
    configs = {name: RLConfig(prompts_per_step=setup["prompts_per_step"], group_size=8,
                              learning_rate=LR, rollout_dtype="float8", lag=4,
                              lr_schedule=sched, schedule_kwargs=kw)
               for name, (sched, kw) in RUNS.items()}
    records, histories = run_all(module, params, task, setup, configs, args)
    save("llm_lr_schedule", {
        "setup": setup, "warm_start": info, "steps": args.steps, "seeds": args.seeds,
        "learning_rate": LR, "rollout_dtype": "float8", "lag": 4, "correction": "none",
        "runs": {name: {"lr_schedule": s, "schedule_kwargs": dict(kw), **records[name]}
                 for name, (s, kw) in RUNS.items()},
    }, histories, quick=args.quick,
        title=f"constant vs length-aware LR, fp8 sampler 4 updates stale (mean of {args.seeds})")


if __name__ == "__main__":
    main()
