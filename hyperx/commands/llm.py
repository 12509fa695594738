"""``hyperx llm``: RL of a small causal LM on a verifiable task under a training-inference mismatch.

Example::

    hyperx llm --task addition --steps 300 --group-size 8 --correction seq_tis \\
        --advantage otb --out runs/llm

builds the RoPE/RMSNorm transformer of :mod:`hyperx.llm.transformer` (or loads a transformers
Flax causal LM with ``--hf-path``), warms it up with supervised steps, then runs the RL loop of
:mod:`hyperx.llm.train` with a ``--rollout-dtype`` sampler that is ``--lag`` updates stale.
It writes ``OUT/metrics.csv`` (one row per step, appended as the step ends),
``OUT/summary.json``, ``OUT/curves.png`` and ``OUT/checkpoints/`` (the RL state after the
warm-up and every ``--checkpoint-every`` steps) beside ``OUT/run.json``. ``--out`` is checked
before any work and follows the run-directory rules of :mod:`hyperx.commands._rundir`: a
folder holding another run or foreign files needs ``--overwrite``, and ``--resume`` continues
an interrupted run from its newest checkpoint to the outputs an uninterrupted run would have
written (the ``time_*`` columns and ``wall_s`` aside). Ctrl-C finishes the save in progress,
keeps the finished steps' rows and exits with status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hyperx._host import device_line, sigint_held, write_atomic, write_csv
from hyperx.commands._args import fail, failing, non_negative_int, positive_int
from hyperx.commands._dryrun import WorkEstimate
from hyperx.commands._plots import figure
from hyperx.commands._rundir import RunDirectory, add_run_options, write_summary_json

if TYPE_CHECKING:
    import jax

    from hyperx.llm.model import LanguageModel
    from hyperx.llm.tasks import Task
    from hyperx.llm.train import Trainer

OUTPUTS = ("metrics.csv", "summary.json", "curves.png", "tb", "wandb", "checkpoints")
DESCRIPTION = ("RL of a small causal LM on a verifiable task under a training-inference "
               "mismatch: a supervised warm-up, then the RL loop with a rollout correction; "
               "writes metrics.csv, summary.json, curves.png and checkpoints/ to --out.")
NOT_SETTINGS = ("func", "command", "quiet", "overwrite", "resume", "out", "dry_run", "track")
"""Options that do not change what a run computes (left out of ``run.json``'s settings)."""
PLOTTED = (("reward", "mean reward"), ("response_length", "response length (tokens)"),
           ("mismatch_kl", "mismatch KL (k1)"), ("grad_norm", "gradient norm"),
           ("ess", "ESS of the weights"), ("lr", "learning rate"))


def _learning_rate(text: str) -> float:
    """An Adam learning rate in (0, 1]: larger steps move every weight of a LM by more than
    its own scale each update, which destroys the policy (``--lr 1e30`` ran to zero reward)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a learning rate in (0, 1], got {text!r}")
    return value


MAX_PPO_EPOCHS = 1000
"""Largest ``--ppo-epochs``: the epochs of a batch run in one compiled call, which neither the
progress bar nor Ctrl-C can reach until it returns (PPO uses 1 to 10)."""
WARMUP_BATCH, EVAL_BATCH = 64, 256
"""The batch sizes of the supervised warm-up and of the greedy evaluations."""


def _ppo_epochs(text: str) -> int:
    """``--ppo-epochs``: an integer in [1, :data:`MAX_PPO_EPOCHS`]."""
    value = positive_int(text)
    if value > MAX_PPO_EPOCHS:
        raise argparse.ArgumentTypeError(
            f"expected an integer in [1, {MAX_PPO_EPOCHS}] (optimiser steps on each batch, "
            f"run in one compiled call that Ctrl-C cannot stop; PPO uses 1 to 10), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hyperx llm``."""
    from hyperx.llm.tasks import REWARDS, TASKS
    from hyperx.llm.train import ADVANTAGES, CORRECTIONS, LR_SCHEDULES, ROLLOUT_DTYPES

    parser.add_argument("--task", choices=TASKS, default="addition", help="verifiable task")
    parser.add_argument("--difficulty", type=positive_int, default=2,
                        help="digits (addition) or string length: sets the response length")
    parser.add_argument("--reward", choices=REWARDS, default="exact", help="reward type")
    parser.add_argument("--steps", type=non_negative_int, default=300, help="RL steps")
    parser.add_argument("--prompts", type=positive_int, default=16, help="prompts per step G")
    parser.add_argument("--group-size", type=positive_int, default=8,
                        help="responses per prompt N")
    parser.add_argument("--advantage", choices=ADVANTAGES, default="grpo", help="estimator")
    parser.add_argument("--correction", choices=tuple(CORRECTIONS), default="none",
                        help="rollout correction preset")
    parser.add_argument("--loss", choices=("ppo", "reinforce"), default="ppo",
                        help="decoupled PPO clip or REINFORCE")
    parser.add_argument("--lr", type=_learning_rate, default=3e-4,
                        help="Adam learning rate in (0, 1]")
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                        help="constant, or the length-aware scale")
    parser.add_argument("--rollout-dtype", choices=ROLLOUT_DTYPES, default="bfloat16",
                        help="numeric path of the sampler")
    parser.add_argument("--lag", type=non_negative_int, default=0,
                        help="the sampler's parameters are LAG updates stale")
    parser.add_argument("--ppo-epochs", type=_ppo_epochs, default=1,
                        help=f"optimiser steps per batch, at most {MAX_PPO_EPOCHS}")
    parser.add_argument("--warmup-steps", type=non_negative_int, default=600,
                        help="supervised warm-up steps before RL")
    parser.add_argument("--d-model", type=positive_int, default=64, help="transformer width")
    parser.add_argument("--layers", type=positive_int, default=2, help="transformer layers")
    parser.add_argument("--heads", type=positive_int, default=4, help="attention heads")
    parser.add_argument("--hf-path",
                        help="directory of a transformers Flax causal LM to train instead "
                             "(its vocabulary must cover the task's character ids)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed")
    parser.add_argument("--checkpoint-every", type=positive_int, default=50,
                        help="save the RL state to OUT/checkpoints every N steps (and after "
                             "the warm-up); --resume continues from the newest")
    add_run_options(parser)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``llm`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    parser = subparsers.add_parser("llm", help="RL of a small LM under a training-inference "
                                   "mismatch, with rollout corrections",
                                   description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def _build(args: argparse.Namespace, task):
    from hyperx.llm import train as rl

    if args.hf_path is not None:
        from hyperx.llm.hf import load_hf_lm

        if not os.path.isfile(os.path.join(args.hf_path, "config.json")):
            fail(f"--hf-path: expected a directory with a saved model (config.json and "
                 f"flax_model.msgpack, from save_pretrained), got {args.hf_path!r}")
        try:
            train_lm, params = load_hf_lm(args.hf_path)
            rollout_lm = train_lm
            if args.rollout_dtype != "float32":
                import jax.numpy as jnp

                rollout_lm, _ = load_hf_lm(args.hf_path, dtype=jnp.bfloat16, with_params=False)
        except (OSError, ValueError, TypeError, KeyError) as err:
            fail(f"--hf-path: transformers cannot load a Flax causal LM from {args.hf_path!r}: "
                 f"{str(err).splitlines()[0] if str(err) else type(err).__name__}")
        if train_lm.vocab_size < task.tokenizer.vocab_size:
            fail(f"--hf-path: the model's vocabulary ({train_lm.vocab_size}) is smaller than "
                 f"the task's ({task.tokenizer.vocab_size})")
        return train_lm, rollout_lm, params
    module, params = rl.make_policy(  # sizes already checked by _module and _check_sizes
        task, d_model=args.d_model, num_layers=args.layers, num_heads=args.heads,
        seed=args.seed)
    train_lm, rollout_lm = rl.transformer_lms(module, args.rollout_dtype)
    return train_lm, rollout_lm, params


def _module(args: argparse.Namespace, task: Task):
    """The built-in policy's module (no parameters); its sizes fail as options."""
    from hyperx.llm import train as rl

    with failing("--d-model/--heads: "):
        return rl.policy_module(task, d_model=args.d_model, num_layers=args.layers,
                                num_heads=args.heads)


def _check_sizes(args: argparse.Namespace, task: Task, train_lm: LanguageModel,
                 rollout_lm: LanguageModel, params: Any) -> None:
    """Fail in one line when the run cannot fit in device memory, from shapes only: the
    parameters with their gradient, Adam's moments, the sampler's copy and ``--lag`` stale
    copies (:func:`~hyperx.llm.train.param_memory_bytes`), then with the largest batch of the
    run (:func:`~hyperx.llm.train.batch_memory_bytes`): an RL step of ``--prompts`` x
    ``--group-size`` responses, a warm-up step of 64 sequences (with the warm-up's per-step
    keys and losses) or an evaluation of 256."""
    import math

    import jax

    from hyperx._validation import check_memory, device_memory_bytes
    from hyperx.llm import train as rl

    available = device_memory_bytes()
    count = sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))
    model = (f"--hf-path {args.hf_path}" if args.hf_path is not None
             else f"--d-model {args.d_model}, --layers {args.layers}")
    length = task.prompt_len + task.answer_len + 2
    weights = rl.param_memory_bytes(params, args.lag)
    responses = args.prompts * args.group_size
    batches = {
        "an RL step": max(rl.batch_memory_bytes(train_lm, task, responses),
                          rl.batch_memory_bytes(rollout_lm, task, responses, train=False)),
        f"a warm-up step of {WARMUP_BATCH}": rl.batch_memory_bytes(
            train_lm, task, WARMUP_BATCH, extra_tokens=0) + 12 * args.warmup_steps,
        f"an evaluation of {EVAL_BATCH}": rl.batch_memory_bytes(train_lm, task, EVAL_BATCH,
                                                                train=False),
    }
    what, batch = max(batches.items(), key=lambda item: item[1])
    with failing():
        check_memory(model + (f", --lag {args.lag}" if args.lag else ""), weights, available,
                     f"device memory for the policy's {count:,} parameters with their "
                     "gradient, Adam's moments and the sampler's copies")
        check_memory(f"--task {args.task} --difficulty {args.difficulty} ({length:,} tokens "
                     f"per sequence), --prompts {args.prompts} x --group-size "
                     f"{args.group_size}", weights + batch, available,
                     f"device memory for the parameters and {what}'s cache, logits and "
                     "activations")


class Carry(NamedTuple):
    """What a checkpoint of ``hyperx llm`` holds.

    Attributes:
      state: the :class:`~hyperx.llm.train.TrainState`, its ``lagged`` padded to ``lag``
        versions with the initial parameters (the sampler uses those while fewer updates
        exist, so the padding changes no step and fixes the checkpoint's structure).
      key: the raw data (``jax.random.key_data``) of the key of the next RL step.
      before: the measurements taken before RL (``greedy_accuracy_before`` and, after a
        warm-up, ``warmup_final_loss``), as float32 scalars.
    """

    state: Any
    key: Any
    before: dict[str, Any]


def _initial_carry(trainer: Trainer, params: Any, key: jax.Array,
                   before: dict[str, Any]) -> Carry:
    """The carry at RL step 0 from ``params`` (:class:`Carry`; ``key`` is the run's seed key)."""
    import jax

    state = trainer.init(params)._replace(lagged=(params,) * trainer.config.lag)
    return Carry(state, jax.random.key_data(jax.random.fold_in(key, 3)), before)


def _warm_start(args: argparse.Namespace, trainer: Trainer, train_lm: LanguageModel, task: Task,
                params: Any, key: jax.Array) -> Carry:
    """Warm up, measure the greedy accuracy and return the carry at RL step 0."""
    import jax

    from hyperx.llm import train as rl

    before = {}
    if args.warmup_steps:
        params, losses = rl.supervised_warmup(train_lm, params, task, jax.random.fold_in(key, 1),
                                              steps=args.warmup_steps)
        before["warmup_final_loss"] = losses[-1]
    before["greedy_accuracy_before"] = rl.evaluate(train_lm, params, task,
                                                   jax.random.fold_in(key, 2))
    return _initial_carry(trainer, params, key, before)


STEP_TIME = (0.0886, 17.7, 64, 2, 128)
"""The median RL step time in seconds and the first step's (compilation included) of the
benchmark model (d_model 64, 2 layers) on 16 x 8 = 128 responses, on the 2-core CPU
(``benchmarks/results/llm_step_time.json``): the dry run scales the step time by the width
squared, the depth and the responses."""


def _work(args: argparse.Namespace) -> list[WorkEstimate]:
    """The dry run's time: the RL steps at the benchmark's rate scaled to this model and
    batch; the warm-up's steps (no measured rate)."""
    seconds, compile_s, width, depth, responses = STEP_TIME
    if args.hf_path is None:
        scale = ((args.d_model / width) ** 2 * args.layers / depth
                 * args.prompts * args.group_size / responses)
        rl_steps = WorkEstimate(args.steps, "RL step", 1 / (seconds * max(scale, 0.1)),
                                f"the benchmark model's step time scaled to --d-model "
                                f"{args.d_model}, --layers {args.layers}", compile_s)
    else:
        rl_steps = WorkEstimate(args.steps, "RL step", None, "a loaded model is not measured")
    return [WorkEstimate(args.warmup_steps, "warm-up step", None,
                         f"supervised steps on {WARMUP_BATCH} sequences, not benchmarked"),
            rl_steps]


def read_metrics(path: Path, steps: int) -> list[dict[str, float]]:
    """The first ``steps`` rows of a ``metrics.csv`` as :func:`hyperx.llm.train.train` logged
    them (floats, written as ``repr`` so read back exactly); ``ValueError`` when the file holds
    fewer rows, a damaged one, or steps out of order."""
    history: list[dict[str, float]] = []
    if steps:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if len(history) == steps:
                    break
                if None in row or None in row.values():
                    raise ValueError(f"row {len(history) + 1} has the wrong number of fields")
                history.append({k: float(v) for k, v in row.items() if v != ""})
                if history[-1].get("step") != len(history):
                    raise ValueError(f"row {len(history)} is not step {len(history)}")
    if len(history) < steps:
        raise ValueError(f"it holds {len(history)} rows")
    return history


def run_from_args(args: argparse.Namespace) -> int:
    """Warm up, train, and write ``metrics.csv``, ``summary.json``, ``curves.png`` and the
    checkpoints (module docstring), or continue an interrupted run with ``--resume``."""
    import jax
    import numpy as np

    from hyperx._validation import memory_estimates
    from hyperx.checkpoint import CheckpointManager
    from hyperx.llm import train as rl
    from hyperx.llm.tasks import Task
    from hyperx.loop import TrainingInterrupted, run_chunks, update_bar

    with failing("--difficulty: "):
        task = Task(args.task, args.difficulty, reward_type=args.reward)
    with memory_estimates() as memory:
        if args.hf_path is None:  # sizes before --out is touched (a loaded model: after _build)
            module = _module(args, task)
            shapes = jax.eval_shape(module.init, jax.random.key(0),
                                    jax.ShapeDtypeStruct((1, task.prompt_len), np.int32))
            _check_sizes(args, task, *rl.transformer_lms(module, args.rollout_dtype), shapes)
    with failing():
        config = rl.RLConfig(prompts_per_step=args.prompts, group_size=args.group_size,
                             learning_rate=args.lr, advantage=args.advantage,
                             correction=rl.correction_preset(args.correction),
                             objective=rl.ObjectiveConfig(loss=args.loss),
                             rollout_dtype=args.rollout_dtype, lag=args.lag,
                             lr_schedule=args.lr_schedule, ppo_epochs=args.ppo_epochs)
    settings = {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS}
    run = RunDirectory(args, "llm", settings, OUTPUTS, extent=f"all {args.steps} steps",
                       checkpointed=True)
    if args.dry_run:
        return run.dry_run(memory=memory, work=_work(args))
    if not run.open():
        return 0
    out = run.out
    path = out / "metrics.csv"
    done: list[dict[str, float]] = []
    columns: list[str] = []
    bar = None
    saved: int | None = None

    def progress(i: int, m: dict[str, float]) -> None:
        nonlocal bar
        # ``step`` and ``tokens_total`` count from the start of the run, not of this chunk;
        # the running sum adds the same floats in the same order as one ``train`` call.
        row = {**m, "step": float(len(done) + 1),
               "tokens_total": (done[-1]["tokens_total"] if done else 0.0) + m["tokens"]}
        with sigint_held():  # whole rows only
            if not columns:
                columns.extend(sorted(set(row) - {"step"}))
                rows.writerow(["step", *columns])
            done.append(row)
            rows.writerow([len(done), *(row.get(k, "") for k in columns)])
            stream.flush()
            tracker.log({k: v for k, v in row.items() if k != "step"}, len(done))
        if not args.quiet:
            bar = update_bar(bar, "hyperx llm", args.steps, len(done), unit="RL step",
                             postfix={"reward": f"{m['reward']:.3f}",
                                      "kl": f"{m['mismatch_kl']:.2e}",
                                      "len": f"{m['response_length']:.2f}"})

    def advance(carry: Carry) -> tuple[Carry, dict]:
        steps = min(args.checkpoint_every, args.steps - int(carry.state.step))
        step_key = jax.random.wrap_key_data(carry.key)
        state, _ = rl.train(trainer, carry.state, step_key, steps, callback=progress, timed=True)
        return carry._replace(state=state, key=jax.random.key_data(
            rl.advance_key(step_key, steps))), {}

    def stopped(stop: KeyboardInterrupt) -> str:
        step = stop.checkpoint_step if isinstance(stop, TrainingInterrupted) else saved
        if step is None:
            return ("before the first checkpoint (after the warm-up); rerun the same command "
                    "without --resume to start again")
        return (f"{len(done)} of {args.steps} steps are in {path}; the checkpoint of step "
                f"{step} is in {out / 'checkpoints'}; rerun the same command with --resume to "
                "continue")

    with run.guard(stopped=stopped):
        start = time.perf_counter()
        train_lm, rollout_lm, params = _build(args, task)
        if args.hf_path is not None:
            _check_sizes(args, task, train_lm, rollout_lm, params)
        key = jax.random.key(args.seed)
        trainer = rl.make_trainer(train_lm, rollout_lm, task, config)
        resources = contextlib.ExitStack()
        with resources:  # closes what the set-up opened if the set-up fails
            manager = resources.enter_context(contextlib.closing(
                CheckpointManager(str(out / "checkpoints"), settings)))
            if not args.quiet:
                sys.stderr.write(device_line("hyperx llm") + "\n")
            if manager.latest_step() is None:
                if not args.quiet:
                    sys.stderr.write(
                        f"hyperx llm: supervised warm-up ({args.warmup_steps} steps, compiled "
                        "as one program) and the greedy evaluation before RL\n")
                carry = _warm_start(args, trainer, train_lm, task, params, key)
                manager.save(0, carry)
            else:
                before = ["greedy_accuracy_before"]
                if args.warmup_steps:
                    before.append("warmup_final_loss")
                like = _initial_carry(trainer, params, key,
                                      dict.fromkeys(before, np.zeros((), np.float32)))
                with failing("--resume: "):
                    carry = manager.restore_latest(like)
                try:
                    done.extend(read_metrics(path, int(carry.state.step)))
                except (OSError, ValueError, csv.Error) as err:
                    fail(f"--resume: {path} does not hold the {int(carry.state.step)} steps of "
                         f"the checkpoint ({err}); rerun with --overwrite to start again")
                columns.extend(sorted(set(done[0]) - {"step"}) if done else ())
            saved = int(carry.state.step)
            if done:
                write_metrics(done, path)
            else:
                write_atomic(path, "")
            stream = resources.enter_context(open(path, "a", newline=""))
            rows = csv.writer(stream)
            tracker = run.tracker()
            resources.callback(tracker.close)
            if not args.quiet and len(done) < args.steps:
                sys.stderr.write("hyperx llm: compiling the RL step and running the first one "
                                 "(the progress bar starts after it)\n")
            resources.callback(lambda: bar is not None and bar.close())
            resources = resources.pop_all()  # from here on the driver closes them
        carry = run_chunks(advance, carry, position=lambda c: int(c.state.step),
                           total=args.steps, save=manager.save, saved_step=saved,
                           cleanup=(resources.close,)).carry
        _write_outputs(args, out, carry, done, train_lm, task, key, start)
    run.finish()
    return 0


def _write_outputs(args: argparse.Namespace, out: Path, carry: Carry,
                   done: list[dict[str, float]], train_lm: LanguageModel, task: Task,
                   key: jax.Array, start: float) -> None:
    """Measure the trained policy, write ``summary.json`` and ``curves.png`` and print the
    one-line result."""
    import jax

    from hyperx.llm import train as rl

    accuracy_before = float(carry.before["greedy_accuracy_before"])
    warm_loss = (float(carry.before["warmup_final_loss"]) if "warmup_final_loss" in carry.before
                 else None)
    accuracy_after = float(rl.evaluate(train_lm, carry.state.params, task,
                                       jax.random.fold_in(key, 2)))
    summary = {
        "command": "hyperx llm " + " ".join(_argv(args)),
        "task": args.task, "difficulty": args.difficulty, "reward_type": args.reward,
        "steps": args.steps, "prompts": args.prompts, "group_size": args.group_size,
        "advantage": args.advantage, "correction": args.correction, "loss": args.loss,
        "lr": args.lr, "lr_schedule": args.lr_schedule, "rollout_dtype": args.rollout_dtype,
        "lag": args.lag, "warmup_steps": args.warmup_steps, "warmup_final_loss": warm_loss,
        "greedy_accuracy_before": accuracy_before, "greedy_accuracy_after": accuracy_after,
        "wall_s": time.perf_counter() - start,
        **summarize(done),
    }
    write_summary_json(out, summary)
    if done:
        plot_curves({args.correction: done}, os.path.join(args.out, "curves.png"),
                    title=f"{args.task} (difficulty {args.difficulty}), {args.rollout_dtype} "
                          f"sampler, lag {args.lag}")
    print(f"hyperx llm: {args.task}, {args.steps} steps, correction {args.correction}, "
          f"advantage {args.advantage}: reward {summary.get('reward_first10', float('nan')):.3f}"
          f" -> {summary.get('reward_last10', float('nan')):.3f}, greedy accuracy "
          f"{accuracy_before:.3f} -> {accuracy_after:.3f}; wrote {args.out}")


def _argv(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` as a command line (``--resume`` left out: it changes no output)."""
    out = []
    for name, value in sorted(vars(args).items()):
        if name in ("func", "command", "resume") or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


def summarize(history: list[dict[str, float]], window: int = 10) -> dict[str, float]:
    """Means of the first and last ``window`` steps of the reward, length and mismatch KL,
    the total tokens and the mean step time of each part."""
    import numpy as np

    if not history:
        return {}
    out: dict[str, float] = {}
    for key in ("reward", "response_length", "mismatch_kl", "k3_kl", "grad_norm",
                "masked_seq_fraction"):
        values = np.array([h[key] for h in history])
        out[f"{key}_first{window}"] = float(values[:window].mean())
        out[f"{key}_last{window}"] = float(values[-window:].mean())
    out["tokens_total"] = history[-1]["tokens_total"]
    for part in ("sample", "score", "update"):
        key = f"time_{part}_s"
        if key in history[0]:
            times = np.array([h[key] for h in history[1:]] or [history[0][key]])
            out[f"median_{key}"] = float(np.median(times))
    return out


def write_metrics(history: list[dict[str, float]], path: str | Path) -> None:
    """One CSV row per step, one column per metric (the union of keys, sorted, step first),
    written atomically (:func:`hyperx._host.write_atomic`)."""
    keys = sorted({k for h in history for k in h} - {"step"})
    write_csv(Path(path), ["step", *keys],
              ([int(h.get("step", 0)), *(h.get(k, "") for k in keys)] for h in history))


def plot_metrics_csv(directory: str | Path) -> Path:
    """Redraw ``curves.png`` of a ``hyperx llm`` run from its ``metrics.csv``; returns the
    path. ``ValueError`` names a damaged file."""
    from hyperx.commands._rundir import read_manifest

    directory = Path(directory)
    path = directory / "metrics.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        try:
            history = [{k: float(v) for k, v in row.items() if v != ""} for row in reader]
        except (TypeError, ValueError):
            raise ValueError(f"{path}: line {reader.line_num} is not numbers") from None
    if not history or "step" not in history[0]:
        raise ValueError(f"{path}: holds no steps (nothing to plot)")
    settings = (read_manifest(directory) or {}).get("settings") or {}
    plot_curves({settings.get("correction", "run"): history}, str(directory / "curves.png"),
                title=f"{settings.get('task', 'llm')}, {settings.get('rollout_dtype', '')} "
                      f"sampler, lag {settings.get('lag', 0)}")
    return directory / "curves.png"


def plot_curves(runs: dict[str, list[dict[str, float]]], path: str, *, title: str = "",
                x: str = "step", keys: Sequence[tuple[str, str]] = PLOTTED,
                smooth: int = 5) -> None:
    """A grid of metric curves (moving average over ``smooth`` steps), one line per run."""
    import numpy as np

    cols = 3
    rows = -(-len(keys) // cols)
    with figure(path, dpi=110, nrows=rows, ncols=cols, figsize=(4.2 * cols, 3.0 * rows),
                squeeze=False) as (fig, axes):
        for ax, (key, label) in zip(axes.flat, keys, strict=False):
            for name, history in runs.items():
                if not history or key not in history[0]:
                    continue
                y = np.array([h[key] for h in history], float)
                xs = np.array([h[x] for h in history], float)
                k = min(smooth, len(y))
                ys = np.convolve(y, np.ones(k) / k, mode="valid")
                ax.plot(xs[k - 1:], ys, label=name, lw=1.3)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel(x.replace("_", " "))
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(keys):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=8)
        if title:
            fig.suptitle(title, fontsize=11)
