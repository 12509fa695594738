"""Constant learning rate against the length-aware schedule under the training-inference mismatch.

The run that degrades in llm_mismatch.py (float8 sampler, parameters 4 updates stale, no
correction; the learning reference's RL settings otherwise) is repeated with
``lr_schedule="length_aware"`` (:func:`hyperx.llm.schedules.length_aware_scale`; the rule is
ours, the idea is arXiv:2602.01826): each trigger halves the step size down to 0.1 of it when the
fast/slow EMA ratio of the response length exceeds 1.03 for 3 steps (default 1.15: responses of
a few tokens surge by a few percent); a second variant also tracks the mismatch KL
(``kl_threshold=1.5``). Per seed it records when the schedule first fires, when the training
reward falls (its 10-step mean 0.05 below its running maximum) and how far the response length
surged, so the question "does it fire before the reward falls, and does it keep the reward?"
is answered per seed. Resumable (cached per run and seed; ``constant`` is llm_mismatch's
``fp8_lag4_none``):

    PYTHONPATH=. .venv/bin/python benchmarks/llm_lr_schedule.py --task addition
    PYTHONPATH=. .venv/bin/python benchmarks/llm_lr_schedule.py --task reverse
"""

from __future__ import annotations

import numpy as np
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

LENGTH = (("threshold", 1.03), ("window", 3), ("warmup_steps", 10), ("factor", 0.5),
          ("min_scale", 0.1))
RUNS = {"constant": ("constant", ()), "length_aware": ("length_aware", LENGTH),
        "length_and_kl_aware": ("length_aware", LENGTH + (("kl_threshold", 1.5),))}
FALL = 0.05
"""The training reward has fallen once its 10-step mean is this far below its running max."""


def timing(curves: dict[str, list[float]]) -> dict:
    """First step the schedule fires (``lr_scale < 1``), first step the training reward has
    fallen, and the response length's largest 10-step mean over its first 10 steps' mean."""
    reward = np.convolve(curves["reward"], np.ones(10) / 10, "valid")
    fell = np.flatnonzero(reward < np.maximum.accumulate(reward) - FALL)
    fired = np.flatnonzero(np.asarray(curves["lr_scale"]) < 1.0)
    length = np.convolve(curves["response_length"], np.ones(10) / 10, "valid")
    return {"fires_at": int(fired[0]) if fired.size else None,
            "reward_falls_at": int(fell[0]) + 9 if fell.size else None,
            "length_surge": float(length.max() / length[0])}


def main() -> None:
    args = parser(__doc__, steps=150, seeds=4).parse_args()
    setup = study_setup(args)
    task, module, params, info = warm_start(setup)
    configs = {name: base_config(setup, rollout_dtype="float8", lag=4,
                                 correction=correction_preset("none"), lr_schedule=sched,
                                 schedule_kwargs=kw)
               for name, (sched, kw) in RUNS.items()}
    seeds = run_study(module, params, task, setup, configs, args)
    records = {}
    for name, (sched, kw) in RUNS.items():
        records[name] = {"lr_schedule": sched, "schedule_kwargs": dict(kw),
                         **run_record(seeds[name], {"constant": seeds["constant"]}
                                      if name != "constant" else {}),
                         "timing": [timing(s["curves"]) for s in seeds[name]]}
        print(name, records[name]["timing"], flush=True)
    report(records)
    save("llm_lr_schedule", {"setup": setup, "warm_start": info, "steps": args.steps,
                             "learning_rate": setup["learning_rate"], "rollout_dtype": "float8",
                             "lag": 4, "correction": "none"}, records, args,
         title=f"constant vs length-aware LR, fp8 sampler 4 updates stale "
               f"(mean of {args.seeds})")


if __name__ == "__main__":
    main()
