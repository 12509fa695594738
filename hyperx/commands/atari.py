"""``hyperx atari``: train an agent on an Atari game, writing metrics, TensorBoard and a plot.

Outputs in ``--out``: ``episodes.csv`` (every finished training game: seed, env, env_step,
raw score, length), ``evaluations.csv`` (final-policy greedy scores per evaluation),
``metrics.csv`` (one row per chunk and seed), ``tb/`` (TensorBoard event files),
``summary.json`` (final and best scores with their protocols, throughput, replay bytes),
``returns.png``, and ``checkpoints/`` with ``--checkpoint`` (resumed by ``--resume``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hyperx._host import device_line, write_csv
from hyperx._validation import plural
from hyperx.commands._args import (
    closest,
    fail,
    failing,
    non_negative_int,
    positive_int,
    unknown_choice,
)
from hyperx.commands._dryrun import WorkEstimate, report
from hyperx.commands._plots import figure
from hyperx.commands._rundir import (
    RunDirectory,
    add_run_options,
    json_safe,
    saved_run,
    write_summary_json,
)
from hyperx.commands._tracking import Tracker

if TYPE_CHECKING:
    from hyperx.loop import Chunk

DESCRIPTION = ("Train a value-based agent on an Atari game through envpool or ale-py; the "
               "whole loop runs as one compiled scan, evaluated between chunks.")
NOT_SETTINGS = ("func", "out", "quiet", "resume", "overwrite", "command", "dry_run",
                "eval_only", "record_video", "track")
"""Options that do not change what a run computes (left out of ``run.json``'s settings)."""
OUTPUTS = ("episodes.csv", "evaluations.csv", "metrics.csv", "summary.json", "returns.png",
           "tb", "wandb", "checkpoints")
PROTOCOL = ("steps", "seeds", "envs_per_seed", "backend", "seed", "eval_every", "eval_episodes",
            "eval_max_steps", "eval_at_start", "chunk_steps", "sticky_actions")
"""The options a run is trained and, with ``--eval-only``, evaluated under (the keyword
arguments of the same names of ``train_atari`` and ``evaluate_saved``)."""


def _protocol(run: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(run, key) for key in PROTOCOL}


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``atari`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    from hyperx.agents.atari import MAX_EVAL_STEPS
    from hyperx.agents.config import ATARI_AGENT_NAMES
    from hyperx.envs.atari import BACKENDS

    p = subparsers.add_parser("atari", help="train a value-based agent on an Atari game",
                              description=DESCRIPTION)
    p.add_argument("--game", nargs="+", default=["Breakout"],
                   help="game, e.g. Breakout, MsPacman, Pong (any case); several games train "
                        "in one program, --seeds split equally between them, on the ALE's "
                        "full action set")
    p.add_argument("--agent", choices=ATARI_AGENT_NAMES, default="hyperagent",
                   help="agent config (dqn_100k: DQN with the Atari-100k settings)")
    p.add_argument("--steps", type=positive_int, default=100_000, help="env steps per seed")
    p.add_argument("--seeds", type=positive_int, default=1, help="agents in one program")
    p.add_argument("--envs-per-seed", type=positive_int, default=1, help="games per agent")
    p.add_argument("--backend", choices=BACKENDS, default="envpool", help="emulator")
    p.add_argument("--seed", type=non_negative_int, default=0, help="base seed")
    p.add_argument("--eval-every", type=positive_int,
                   help="env steps per seed between evaluations (default: steps / 10)")
    p.add_argument("--eval-episodes", type=non_negative_int, default=10,
                   help="greedy games per seed and evaluation")
    p.add_argument("--eval-max-steps", type=positive_int, default=MAX_EVAL_STEPS,
                   help="agent steps per evaluation game (the 108,000-frame cap)")
    p.add_argument("--best-eval-episodes", type=non_negative_int, default=0,
                   help="re-evaluate the best checkpoint on this many games (HyperAgent: 200)")
    p.add_argument("--chunk-steps", type=positive_int,
                   help="env steps per seed per compiled chunk, log line and checkpoint "
                        "(default: --eval-every, which must be a multiple of it)")
    p.add_argument("--learning-starts", type=non_negative_int,
                   help="override the config's learning start in env steps (default: the "
                        "config's: 2,000; hyperdqn 50,000; dqn_100k 1,600)")
    p.add_argument("--buffer-size", type=positive_int,
                   help="override the config's replay size (default: the config's: 100,000; "
                        "hyperdqn 1,000,000)")
    p.add_argument("--update-every", type=positive_int,
                   help="override the config's env steps per learning step (default: the "
                        "config's: 1 for hyperagent, hyperfqi and dqn_100k, as their "
                        "references; 4 for dqn, hyperdqn, ensemble_plus, epinet_dqn, as Nature "
                        "DQN)")
    p.add_argument("--eval-epsilon", type=float,
                   help="override the config's evaluation epsilon (default: the config's: 0 "
                        "for the hyper agents, greedy on a fresh index per game; 0.05 for dqn, "
                        "Nature DQN's; 0.001 for dqn_100k, Dopamine's Atari-100k)")
    p.add_argument("--eval-at-start", action="store_true",
                   help="also evaluate the untrained network (step 0)")
    p.add_argument("--sticky-actions", action="store_true", help="repeat probability 0.25")
    p.add_argument("--host-loop", action="store_true",
                   help="drive the gymnasium API from Python instead of the XLA step")
    p.add_argument("--checkpoint", action="store_true",
                   help="checkpoint to OUT/checkpoints after each chunk")
    p.add_argument("--eval-only", action="store_true",
                   help="instead of training, evaluate the newest intact checkpoint of the run "
                        "in --out under its own protocol (the settings in its run.json); "
                        "writes OUT/eval_only.json")
    p.add_argument("--record-video", type=non_negative_int, default=0, metavar="N",
                   help="with --eval-only: write seed 0's first N evaluation games as MP4 to "
                        "OUT/videos (needs the video extra: pip install 'hyperx-rl[video]')")
    add_run_options(p)
    p.set_defaults(func=run_from_args)
    return p


def _validate(args: argparse.Namespace) -> None:
    from hyperx.envs.atari import game_names

    names = game_names()
    games = []
    for name in args.game:
        game = closest(name, names)
        if game is None:
            unknown_choice("--game", name, names, f"an Atari game such as Breakout or "
                           f"MsPacman (one of {len(names)}; see hyperx.envs.atari.game_names())")
        games.append(game)
    args.game = games[0] if len(set(games)) == 1 else games
    if args.seeds % len(games):
        fail(f"--seeds: expected a multiple of the {len(games)} games of --game (each game "
             f"gets an equal block of seeds), got {args.seeds}")
    if args.envs_per_seed > args.steps:
        fail(f"--envs-per-seed: expected at most --steps = {args.steps}, "
             f"got {args.envs_per_seed}")
    if args.eval_every is not None and args.eval_every > args.steps:
        fail(f"--eval-every: expected at most --steps = {args.steps}, got {args.eval_every}")


def _config(args: argparse.Namespace) -> Any:
    from hyperx.agents.config import get_config

    overrides = {k: v for k, v in (("learning_starts", args.learning_starts),
                                   ("buffer_size", args.buffer_size),
                                   ("update_every", args.update_every),
                                   ("eval_epsilon", args.eval_epsilon)) if v is not None}
    with failing():
        return get_config(args.agent, env="atari", **overrides)


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``hyperx atari`` from parsed arguments; returns the exit status."""
    from hyperx.agents.core import updates_per_iteration

    if args.eval_only:
        return _eval_only(args)
    if args.record_video:
        fail("--record-video: records the games of --eval-only; add --eval-only (and train "
             "with --checkpoint first)")
    _validate(args)
    config = _config(args)
    try:
        updates_per_iteration(config, args.envs_per_seed)
    except ValueError as err:
        fail(str(err).replace("num_envs:", "--envs-per-seed:"))
    settings = {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS}
    run = RunDirectory(args, "atari", settings, OUTPUTS,
                       extent=f"all {args.steps} env steps per seed",
                       checkpointed=args.checkpoint)
    if args.dry_run:
        return _dry_run(args, config, run)
    if not run.open():
        return 0
    from hyperx.agents.atari import train_atari

    out = run.out
    log = RunLog(out, args.seeds, progress=not args.quiet, total=args.steps,
                 resume=run.resumed, tracker=run.tracker(),
                 games=_games(args))

    def stopped(stop: KeyboardInterrupt) -> str:
        return run.stopped(stop, unit="env step", per=" per seed",
                           kept=f"the chunks so far are in {out}")

    with run.guard(stopped=stopped):
        try:
            result = train_atari(
                config, args.game, **_protocol(args), best_eval_episodes=args.best_eval_episodes,
                host_loop=args.host_loop, on_chunk=log,
                checkpoint_dir=str(out / "checkpoints") if args.checkpoint else None)
        finally:
            log.close()
    write_games(out, result)
    summary = write_summary(out, result, args, config)
    run.finish()
    final = summary["final_score_mean"]
    print(f"{args.agent} on {_title_games(args.game)}, {plural(args.seeds, 'seed')} x "
          f"{plural(args.envs_per_seed, 'env')}, "
          f"{result.steps_done} steps: final greedy score "
          f"{'n/a' if final is None else f'{final:.1f}'}, "
          f"{result.env_steps_per_s:.0f} env steps/s; wrote {out}")
    return 0


def _eval_only(args: argparse.Namespace) -> int:
    """``--eval-only``: evaluate the saved agent of the run in ``--out`` under that run's
    settings and protocol (:func:`hyperx.agents.atari_eval.evaluate_saved`), with the run's
    games per evaluation (10 when the run evaluated none); writes ``eval_only.json``."""
    out, run = Path(args.out), saved_run(args, "atari")
    episodes = run.eval_episodes or 10
    if args.record_video > episodes:
        fail(f"--record-video: expected at most the {episodes} games it evaluates per seed, "
             f"got {args.record_video}")
    config = _config(run)
    if args.dry_run:
        return report("atari", out=args.out, outputs=["eval_only.json"]
                      + (["videos"] if args.record_video else []), memory=[], resume=True,
                      work=[WorkEstimate(run.seeds * episodes, "evaluation game", None,
                                         f"up to {run.eval_max_steps:,} agent steps each")])
    from hyperx.agents.atari_eval import evaluate_saved

    try:
        saved = evaluate_saved(str(out / "checkpoints"), config, run.game, **_protocol(run),
                               episodes=episodes, record_video=args.record_video,
                               video_dir=str(out / "videos"))
    except ValueError as err:
        fail(f"--eval-only: {err}")
    except ImportError as err:
        fail(f"--record-video: {err}")
    means = saved.scores.mean(axis=1)
    result = {"env_step": saved.env_step, "protocol": saved.protocol,
              "score_mean": float(means.mean()), "score_mean_per_seed": means.tolist(),
              "scores": saved.scores.tolist(), "videos": list(saved.videos)}
    write_summary_json(out, result, "eval_only.json")
    videos = (f", {plural(len(saved.videos), 'video')} in {out / 'videos'}"
              if saved.videos else "")
    print(f"{run.agent} on {_title_games(run.game)}, the checkpoint of env step "
          f"{saved.env_step}: mean score {result['score_mean']:.1f} over "
          f"{plural(run.seeds, 'seed')} x {plural(episodes, 'game')} ({saved.protocol}); "
          f"wrote {out / 'eval_only.json'}{videos}")
    return 0


THROUGHPUT = {"hyperagent": (643.2, 0.0748), "dqn": (886.4, 0.0263)}
"""Per agent of the Atari throughput benchmark (Breakout, one game, on the 2-core CPU,
``benchmarks/results/atari_throughput.json``): env steps per second of the compiled loop when
it does not learn, and the seconds of one update inside the loop. The dry run's rate for a
config is ``1 / (1 / no_learning + update / update_every)``, from ``hyperagent``'s update for
the index-sampled agents and ``dqn``'s for the rest."""


def _games(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The game of each seed of a run with several games, else None."""
    if isinstance(args.game, str):
        return None
    from hyperx.agents.atari import seed_games

    return seed_games(args.game, args.seeds)


def _title_games(game: str | list[str]) -> str:
    return game if isinstance(game, str) else ", ".join(game)


def _dry_run(args: argparse.Namespace, config: Any, run: RunDirectory) -> int:
    """``--dry-run``: the checks a real run makes before it touches ``--out``, then the plan
    (:mod:`hyperx.commands._dryrun`)."""
    from hyperx._validation import memory_estimates
    from hyperx.agents.atari import check_replay_memory

    with memory_estimates() as memory:
        with failing():
            check_replay_memory(config, args.seeds, args.steps)
    measured = "dqn" if config.head != "hypermodel" or config.index_dim == 1 else "hyperagent"
    no_learning, update = THROUGHPUT[measured]
    rate = 1 / (1 / no_learning + update / config.update_every)
    evaluations = (args.steps // (args.eval_every or max(args.steps // 10, 1))
                   + int(args.eval_at_start))
    return run.dry_run(memory=memory, work=[
        WorkEstimate(args.steps * args.seeds, "env step", rate,
                     f"{measured}'s measured update and acting cost at update_every = "
                     f"{config.update_every}, benchmarks/results/atari_throughput.json", 60.0),
        WorkEstimate(evaluations * args.eval_episodes * args.seeds, "evaluation game", None,
                     f"up to {args.eval_max_steps:,} agent steps each")])


CSV_FIELDS = {"episodes": ("seed", "env", "env_step", "score", "length"),
              "evaluations": ("seed", "env_step", "score"),
              "metrics": ("env_step", "seed", "loss", "train_games", "train_score",
                          "eval_score", "env_steps_per_s")}
"""The columns of each CSV; a run with several games adds ``game`` to each (:func:`fields`)."""


def fields(name: str, several: bool) -> tuple[str, ...]:
    """The columns of ``name``.csv, with ``game`` last when the run has several games."""
    return CSV_FIELDS[name] + (("game",) if several else ())


def write_games(out: Path, result: Any) -> None:
    """Rewrite ``episodes.csv`` and ``evaluations.csv`` from the finished run's result, which
    holds every game and evaluation from the start (a resumed run's chunk logs may miss a
    chunk that finished between its checkpoint and its log line)."""
    several = len(set(result.games)) > 1
    for name, rows in (("episodes", result.episodes), ("evaluations", result.evaluations)):
        columns = fields(name, several)
        write_csv(out / f"{name}.csv", columns, ([r.get(c, "") for c in columns] for r in rows))


class RunLog:
    """Per-chunk logging: CSV rows (episodes, evaluations, metrics), the tracker's scalars
    (TensorBoard, W&B), a bar."""

    def __init__(self, out: Path, seeds: int, *, progress: bool, total: int,
                 resume: bool = False, tracker: Tracker | None = None,
                 games: tuple[str, ...] | None = None):
        """A resumed run (``resume``) keeps the rows already in ``out`` up to the env step it
        resumed from (the first chunk's ``start``: rows the interrupted run wrote past an
        older checkpoint it fell back to are dropped), then appends; ``tracker``
        (:class:`hyperx.commands._tracking.Tracker`) receives each chunk's scalars;
        ``games``: the game of each seed of a run with several games (a ``game`` column)."""
        self.out, self.seeds, self._resume, self._games = out, seeds, resume, games
        self._files: dict[str, Any] = {}
        self._writers: dict[str, csv.DictWriter] = {}
        self._tracker = tracker
        self._bar = None
        self._progress, self._total = progress, total
        if progress:
            sys.stderr.write(f"{device_line('atari')}\natari: compiling the training loop and "
                             "running the first chunk (the progress bar starts after it)\n")

    def _open(self, start: int) -> None:
        """Open the CSVs: each holds its header and, for a resumed run, its rows up to env
        step ``start``, written back atomically before anything is appended."""
        for name in CSV_FIELDS:
            columns = fields(name, self._games is not None)
            path = self.out / f"{name}.csv"
            kept = []
            if self._resume and path.exists():
                with open(path, newline="") as f:
                    kept = [[row.get(c, "") for c in columns] for row in csv.DictReader(f)
                            if row.get("env_step", "").isdigit()
                            and int(row["env_step"]) <= start]
            write_csv(path, columns, kept)
            self._files[name] = open(path, "a", newline="")  # noqa: SIM115
            self._writers[name] = csv.DictWriter(self._files[name], fieldnames=columns)

    def __call__(self, chunk: Chunk) -> None:
        from hyperx.loop import update_bar

        if not self._files:
            self._open(chunk.start)
        step, metrics = chunk.done, chunk.metrics
        for row in metrics["episodes"]:
            self._writers["episodes"].writerow(row)
        scores = metrics["scores"]
        scalars: dict[str, float | None] = {"env_steps_per_s": metrics["steps_per_s"]}
        for s in range(self.seeds):
            games = [r["score"] for r in metrics["episodes"] if r["seed"] == s]
            eval_score = None if scores is None else float(np.mean(scores[s]))
            label = {} if self._games is None else {"game": self._games[s]}
            if scores is not None:
                self._writers["evaluations"].writerow(dict(seed=s, env_step=step,
                                                           score=eval_score, **label))
            row = dict(env_step=step, seed=s, loss=float(metrics["loss"][s]),
                       train_games=len(games),
                       train_score=float(np.mean(games)) if games else "",
                       eval_score="" if eval_score is None else eval_score,
                       env_steps_per_s=metrics["steps_per_s"], **label)
            self._writers["metrics"].writerow(row)
            scalars.update({f"seed{s}/{key}": row[key] or None
                            for key in ("loss", "train_score", "eval_score")})
        if self._tracker is not None:
            self._tracker.log(scalars, step)
            self._tracker.flush()
        for f in self._files.values():
            f.flush()
        if self._progress:
            self._bar = update_bar(
                self._bar, "atari", self._total, step, unit="env step",
                postfix={"training, all seeds": f"{metrics['steps_per_s']:.0f} env steps/s"})

    def close(self) -> None:
        """Flush and close every writer."""
        for f in self._files.values():
            f.close()
        if self._tracker is not None:
            self._tracker.close()
        if self._bar is not None:
            self._bar.close()


def write_summary(out: Path, result: Any, args: argparse.Namespace, config: Any) -> dict:
    """``summary.json`` and ``returns.png`` from the result; returns the summary."""
    from hyperx.agents.atari import eval_protocol

    evaluations = result.evaluations
    last_step = max((e["env_step"] for e in evaluations), default=None)
    final = [e["score"] for e in evaluations if e["env_step"] == last_step]
    several = {} if isinstance(args.game, str) else {"final_score_mean_per_game": {
        g: float(np.mean([e["score"] for e in evaluations
                          if e["env_step"] == last_step and e["game"] == g])) if final else None
        for g in args.game}}
    summary = {
        "game": args.game, "agent": args.agent, "backend": args.backend,
        "seeds": args.seeds, "envs_per_seed": args.envs_per_seed,
        "env_steps_per_seed": result.steps_done,
        "final_score_mean": float(np.mean(final)) if final else None,
        "final_scores": final,
        **several,
        "final_protocol": (f"final policy, {eval_protocol(config)}, {args.eval_episodes} "
                           "games per seed, no life loss, no clipping, "
                           f"{args.eval_max_steps:,}-step cap"),
        "best": result.best,
        "training_games": len(result.episodes),
        "env_steps_per_s": result.env_steps_per_s,
        "compile_time_s": result.compile_time_s,
        "replay_bytes_per_seed": result.replay_bytes,
    }
    summary = json_safe(summary)
    write_summary_json(out, summary)
    _plot(out / "returns.png", result, f"{args.agent} on {_title_games(args.game)}")
    return summary


def plot_atari_csv(directory: str | Path) -> Path:
    """Redraw ``returns.png`` of a ``hyperx atari`` run from its ``episodes.csv`` and
    ``evaluations.csv``; returns the path. ``ValueError`` names a damaged file."""
    from types import SimpleNamespace

    from hyperx.commands._rundir import read_manifest

    directory = Path(directory)
    rows = {}
    for name in ("episodes", "evaluations"):
        path = directory / f"{name}.csv"
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames not in (list(fields(name, False)), list(fields(name, True))):
                raise ValueError(f"{path}: expected the columns {','.join(CSV_FIELDS[name])} "
                                 f"(and game, for several games), got "
                                 f"{','.join(reader.fieldnames or [])}")
            number = {"score": float, "game": str}
            try:
                rows[name] = [{k: number.get(k, int)(v) for k, v in row.items()}
                              for row in reader]
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {reader.line_num} is not numbers") from None
    settings = (read_manifest(directory) or {}).get("settings") or {}
    title = f"{settings.get('agent', 'agent')} on {_title_games(settings.get('game', 'Atari'))}"
    _plot(directory / "returns.png", SimpleNamespace(**rows), title)
    return directory / "returns.png"


def _plot(path: Path, result: Any, title: str) -> None:
    seeds = sorted({e["seed"] for e in result.episodes} | {e["seed"] for e in
                                                           result.evaluations})
    with figure(path, dpi=100, figsize=(6, 4)) as (_, ax):
        for s in seeds:
            games = [e for e in result.episodes if e["seed"] == s]
            if games:
                steps = np.array([g["env_step"] for g in games])
                scores = np.array([g["score"] for g in games])
                window = max(1, min(20, len(scores)))
                smooth = np.convolve(scores, np.ones(window) / window, mode="valid")
                ax.plot(steps[window - 1:], smooth, alpha=0.6,
                        label=f"{_seed_label(s, games)} training")
            evals = [e for e in result.evaluations if e["seed"] == s]
            if evals:
                ax.plot([e["env_step"] for e in evals], [e["score"] for e in evals], "o-",
                        label=f"{_seed_label(s, evals)} evaluation")
        ax.set(xlabel="env steps per seed", ylabel="game score (raw)", title=title)
        if seeds:
            ax.legend(fontsize=7)


def _seed_label(seed: int, rows: list[dict]) -> str:
    """``seed 3``, or ``seed 3 (Pong)`` when its rows name a game."""
    return f"seed {seed} ({rows[0]['game']})" if "game" in rows[0] else f"seed {seed}"
