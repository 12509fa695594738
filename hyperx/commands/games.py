"""``hyperx games``: repeated games between no-regret learners, many seeds, in the shape of
``hyperx bandit``.

Example (GP-MW's experiment, docs/games.md)::

    hyperx games --game zero_sum --actions 30 --steps 200 --seeds 100 \\
        --matchups gp_mw:random,exp3:random,hedge:random,gp_mw:exp3 --out runs/games

``--game`` is ``zero_sum`` (a random smooth two-player zero-sum game per seed, as in GP-MW's
experiments), ``general_sum`` (independent smooth payoffs for each of ``--players`` players),
``rps`` (rock-paper-scissors) or ``sioux_falls`` (the authors' traffic-routing game: a random
subset of ``--controlled`` of its 528 players learns, drawn with ``--seed``, the others keep their
shortest path; :mod:`hyperx.games.routing_play`). Seed s plays the same game in every matchup.
``--matchups`` is a comma-separated list of ``NAME:NAME[:NAME...]``, one learner per player
(names: :data:`hyperx.games.LEARNERS`); on ``sioux_falls`` one name per matchup, the learner of
every controlled player (names: :data:`hyperx.games.ROUTING_LEARNERS`). Each matchup runs its
seeds in vmapped ``lax.scan`` calls of ``--seeds-per-part`` seeds.

Writes to ``--out`` (checked before any work, see :mod:`hyperx.commands._rundir`):

- ``parts/``: one CSV (and a JSON of timings and equilibrium gaps) per matchup and block of
  seeds, each written as soon as it is computed; ``--resume`` skips the parts already there;
- ``regret.csv``: rows ``matchup, player, learner, seed, t, regret`` (player i's cumulative
  regret ``R_i(t)`` at about ``--points`` log-spaced t ending at the horizon);
- ``summary.json``: the settings and, per matchup, each player's time-averaged final regret
  ``R_i(T) / T`` and the equilibrium gap of the play (NashConv of the time-averaged strategies
  in a two-player zero-sum game, else the CCE gap of the time-averaged product distribution; on
  ``sioux_falls`` the relative delay at T and that of a pure Nash equilibrium of the same
  players),
  with means, standard deviations and 95% intervals, the wall time, the compile time (from
  jax's compile events) and seed-rounds per second of run time (compilation left out);
- ``regret.png``: player 1's mean time-averaged regret with its 95% band, one line per matchup.

Bad arguments print one line ``hyperx: error: ...`` and exit with status 2; Ctrl-C stops after
the finished parts and says how to resume (exit status 130).
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._validation import INT32_MAX, check_memory, host_memory_bytes, memory_estimates, plural
from hyperx.commands._args import fail, failing, non_negative_int, positive_int
from hyperx.commands._dryrun import WorkEstimate
from hyperx.commands._parts import Block, Parts, add_parts_options, log_checkpoints
from hyperx.commands._plots import plot_bands
from hyperx.commands._rundir import RunDirectory, format_interval, interval95, write_summary_json

GAMES = ("zero_sum", "general_sum", "rps", "sioux_falls")
CSV_COLUMNS = ("matchup", "player", "learner", "seed", "t", "regret")
META_KEYS = ("wall_time_s", "compile_time_s", "seed_rounds", "gaps")
"""What each part's JSON holds: its timings and the gap of each seed."""
OUTPUTS = ("parts", "regret.csv", "summary.json", "regret.png", "tb", "wandb")
SETTINGS = ("game", "actions", "players", "controlled", "steps", "seeds", "seed", "noise",
            "matchups",
            "points", "seeds_per_part")
DESCRIPTION = ("Repeated games between no-regret learners (Hedge, Exp3.P, Exp3-IX, GP-MW, GP-MW "
               "on Ensemble++) over many seeds: writes regret.csv, summary.json and regret.png "
               "to --out.")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``games`` subcommand to a ``hyperx`` subparsers object; returns its parser."""
    from hyperx.games.learners import LEARNERS

    parser = subparsers.add_parser("games", help="no-regret learners in repeated games",
                                   description=DESCRIPTION)
    parser.add_argument("--game", choices=GAMES, default="zero_sum", help="the game")
    parser.add_argument("--actions", type=positive_int,
                        help="actions per player K (default 30; rps: 3)")
    parser.add_argument("--players", type=positive_int, default=2,
                        help="players N (zero_sum and rps: 2)")
    parser.add_argument("--controlled", type=positive_int,
                        help="sioux_falls: learning players (default 20 of 528)")
    parser.add_argument("--steps", type=positive_int, default=200, help="rounds T")
    parser.add_argument("--seeds", type=positive_int, default=100, help="seeds (one game each)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="base seed")
    parser.add_argument("--noise", type=float,
                        help="std sigma > 0 of the payoff noise (bandit feedback; default 1); "
                             "sioux_falls: as a fraction of each player's largest travel "
                             "time (default 0.001, the authors')")
    parser.add_argument("--matchups", default="gp_mw:random,exp3:random,hedge:random",
                        help="NAME:NAME[:...] list, one learner per player; names: "
                             + ", ".join(LEARNERS))
    add_parts_options(parser)
    parser.set_defaults(func=run_from_args)
    return parser


def _num_actions(args: argparse.Namespace) -> tuple[int, ...]:
    if args.game == "rps":
        if args.actions not in (None, 3) or args.players != 2:
            fail(f"--game rps: has 2 players with 3 actions, got --players {args.players} "
                 f"--actions {args.actions}")
        return (3, 3)
    k = 30 if args.actions is None else args.actions
    if args.game == "zero_sum" and args.players != 2:
        fail(f"--players: a zero_sum game has 2 players, got {args.players} (use --game "
             "general_sum)")
    if args.players < 2:
        fail(f"--players: expected at least 2, got {args.players}")
    outcomes = k ** args.players
    with failing():
        check_memory(f"--actions {k} --players {args.players}",
                     24.0 * outcomes**2 + 4.0 * args.seeds * args.players * outcomes,
                     host_memory_bytes(), f"host memory for {outcomes:,} joint actions "
                     "(the games and their kernel matrix)")
    return (k,) * args.players


def _matchups(args: argparse.Namespace, num_actions: tuple[int, ...]) -> list[tuple[str, list]]:
    from hyperx.games.learners import LEARNERS, PlayerSpec, make_learner

    out = []
    for text in [m.strip() for m in args.matchups.split(",") if m.strip()]:
        names = text.split(":")
        if len(names) != len(num_actions):
            fail(f"--matchups {text}: expected one learner per player ({len(num_actions)}), "
                 f"got {len(names)}")
        learners = []
        for i, name in enumerate(names):
            if name not in LEARNERS:
                fail(f"--matchups {text}: expected learner names in {sorted(LEARNERS)}, "
                     f"got {name!r}")
            with failing(f"--matchups {text}: "):
                learners.append(make_learner(name, PlayerSpec(i, num_actions, args.steps,
                                                              args.noise)))
        out.append((text, learners))
    if not out:
        fail("--matchups: expected at least one NAME:NAME matchup")
    return out


def _routing(args: argparse.Namespace, *, build: bool = True):
    """The routing game, the controlled players' setting, their learners (one population per
    matchup) and the relative delay of a pure Nash equilibrium of the same players; with
    ``build=False`` (``--dry-run``) the options are checked but no learner is fitted and no
    equilibrium computed (``None`` in their places)."""
    import jax

    from hyperx.games import routing_play as rp
    from hyperx.games.routing import best_response_equilibrium, sioux_falls

    game = sioux_falls()
    if args.controlled > game.num_players:
        fail(f"--controlled: expected at most {game.num_players} players, got {args.controlled}")
    controlled = np.sort(np.random.default_rng(args.seed).permutation(game.num_players)
                         [:args.controlled])
    key = jax.random.key(args.seed)
    with failing("--steps / --noise: "):
        s = rp.setting(game, controlled, args.steps, key, noise_fraction=args.noise)
    out = []
    for text in [m.strip() for m in args.matchups.split(",") if m.strip()]:
        if text not in rp.ROUTING_LEARNERS:
            fail(f"--matchups {text}: on sioux_falls each matchup is one learner name for every "
                 f"controlled player, one of {list(rp.ROUTING_LEARNERS)}")
        if not build:
            out.append((text, None))
            continue
        with failing(f"--matchups {text}: "):
            population = rp.make_population(text, game, s, jax.random.fold_in(key, 1))
        out.append((text, [population] * args.controlled))
    if not out:
        fail("--matchups: expected at least one learner name")
    if not build:
        return game, s, out, None
    movable = np.zeros(game.num_players, bool)
    movable[controlled] = True
    equilibrium = best_response_equilibrium(game, movable)
    return game, s, out, float(equilibrium.relative_delay)


def _games(args: argparse.Namespace, num_actions: tuple[int, ...], start: int, stop: int):
    import jax
    import jax.numpy as jnp

    from hyperx.games.normal_form import random_gp_game, rock_paper_scissors

    if args.game == "rps":
        return jnp.broadcast_to(rock_paper_scissors(), (stop - start, 2, 3, 3))
    base = jax.random.key(args.seed)
    return jnp.stack([random_gp_game(jax.random.fold_in(base, s), num_actions,
                                     zero_sum=args.game == "zero_sum")
                      for s in range(start, stop)])


def _players(args: argparse.Namespace, text: str) -> list[str]:
    """The learner of each player whose regret a part records (routing: the controlled
    players, all running the matchup's one learner)."""
    if args.game == "sioux_falls":
        return text.split(":") * args.controlled
    return text.split(":")


def _expected_rows(text: str, players: list[str], block: Block,
                   checkpoints: np.ndarray) -> list[tuple]:
    """The identifying columns of one part's rows: matchup, player, learner, seed, t."""
    _, start, stop = block
    return [(text, i + 1, players[i], seed, int(t)) for seed in range(start, stop)
            for t in checkpoints for i in range(len(players))]


def _run_part(args: argparse.Namespace, num_actions: tuple[int, ...], text: str, program: Any,
              block: Block, checkpoints: np.ndarray, parts: Parts) -> None:
    """Play one block of seeds of one matchup and write its part (rows and timings)."""
    _, start, stop = block
    import jax

    from hyperx.games.normal_form import cce_gap, nash_conv
    from hyperx.loop import compile_timer

    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(args.seed + 1), s))(
        np.arange(start, stop))
    begin = time.perf_counter()
    with compile_timer() as compiling:
        if args.game == "sioux_falls":
            rounds = program(keys)
            regret = np.asarray(rounds.regret)[:, checkpoints - 1]      # (S, C, controlled)
            gaps = rounds.relative_delay[:, -1]
        else:
            games = _games(args, num_actions, start, stop)
            result = program(games, keys)
            regret = np.asarray(result.rounds.regret)[:, checkpoints - 1]  # (S, C, N)
            if args.game != "general_sum":
                gaps = jax.vmap(nash_conv)(games, result.mean_strategies)
            else:
                gaps = jax.vmap(cce_gap)(games, result.mean_joint)
    seconds = time.perf_counter() - begin
    names = _players(args, text)
    parts.write(block, ((text, i + 1, names[i], start + s, int(checkpoints[c]),
                         float(regret[s, c, i])) for s, c, i in np.ndindex(regret.shape)),
                {"wall_time_s": seconds, "compile_time_s": min(compiling.seconds, seconds),
                 "seed_rounds": (stop - start) * args.steps,
                 "gaps": np.asarray(gaps, np.float64).tolist()})


GAMES_RATE = 138_000
"""Seed-rounds per second of GP-MW against Exp3.P on 2-player games with K = 30, 1,000 seeds,
on the 2-core CPU (``benchmarks/results/games.json``, ``throughput``): the dry run's rate."""


def run_from_args(args: argparse.Namespace) -> int:
    """Run the games described by parsed ``args`` and write the outputs (module docstring)."""
    routing = args.game == "sioux_falls"
    if args.noise is None:
        args.noise = 0.001 if routing else 1.0
    if not math.isfinite(args.noise) or args.noise <= 0:
        fail(f"--noise: expected a finite number > 0, got {args.noise}")
    if np.float32(args.noise) ** 2 == 0:  # the learners' noise variance, in float32
        fail(f"--noise: {args.noise} squared underflows to 0 in float32 (the noise variance); "
             "expected at least 1e-19")
    if args.controlled is not None and not routing:
        fail(f"--controlled: only for --game sioux_falls, got --game {args.game}")
    if routing and args.controlled is None:
        args.controlled = 20
    texts = [m.strip() for m in args.matchups.split(",") if m.strip()]
    twice = next((text for i, text in enumerate(texts) if text in texts[:i]), None)
    if twice is not None:
        fail(f"--matchups: {twice} is given twice; expected each matchup once")
    if args.seed + args.seeds + 1 > INT32_MAX:
        fail(f"--seed, --seeds: expected seed ids in [0, {INT32_MAX - 1}], got {args.seed} .. "
             f"{args.seed + args.seeds}")
    with memory_estimates() as memory:
        if routing:
            game, setting, matchups, equilibrium_delay = _routing(
                args, build=not args.dry_run)
            num_actions, per_seed = (), 4.0 * args.steps * (args.controlled + 2)
        else:
            num_actions = _num_actions(args)
            matchups = _matchups(args, num_actions)
            per_seed = 16.0 * args.steps * len(num_actions) + 8.0 * math.prod(num_actions)
        checkpoints = log_checkpoints(args)
        part = min(args.seeds, args.seeds_per_part)
        with failing():
            check_memory(f"--seeds-per-part {args.seeds_per_part}", part * per_seed,
                         host_memory_bytes(), "memory for one part's rounds")
    settings = {key: getattr(args, key) for key in SETTINGS}
    run = RunDirectory(args, "games", settings, OUTPUTS, extent="every part")
    if args.dry_run:
        return run.dry_run(memory=memory, work=[WorkEstimate(
            args.steps * args.seeds * len(matchups), "seed-round",
            None if routing else GAMES_RATE, "sioux_falls not measured" if routing else
            "GP-MW against Exp3.P, K = 30, 1,000 seeds, benchmarks/results/games.json",
            5.0 * len(matchups))])
    run.open(rebuild=True)
    out = run.out
    parts = Parts(out, "matchup", len(matchups), args.seeds, args.seeds_per_part,
                  columns=CSV_COLUMNS, meta_keys=META_KEYS)

    def expected(block: Block) -> list[tuple]:
        text = matchups[block[0]][0]
        return _expected_rows(text, _players(args, text), block, checkpoints)

    todo = parts.todo(expected)
    from hyperx.games.play import make_play_seeds

    if routing:
        from hyperx.games.routing_play import play_routing

        programs = {i: functools.partial(play_routing, game, setting, matchups[i][1][0])
                    for i in {b[0] for b in todo}}
    else:  # one compiled program per matchup, all parts
        programs = {i: make_play_seeds(matchups[i][1], args.steps, noise_std=args.noise)
                    for i in {b[0] for b in todo}}
    parts.run(run, todo, lambda block: _run_part(
        args, num_actions, matchups[block[0]][0], programs[block[0]], block, checkpoints,
        parts), progress=None if args.quiet else "games")
    summary = _write_outputs(parts, args, matchups, checkpoints,
                             {"equilibrium_relative_delay": equilibrium_delay} if routing else {})
    if todo:  # each matchup's final regret and gap, once, when the games ran
        tracker = run.tracker()
        try:
            tracker.log({key: value for text, entry in summary["matchups"].items()
                         for key, value in ((f"average_regret/{text}",
                                             entry.get("mean_regret",
                                                       entry["average_regret"][0])["mean"]),
                                            (f"{summary['gap']}/{text}",
                                             entry["gap"]["mean"]))}, args.steps)
        finally:
            tracker.close()
    run.finish()
    if not args.quiet:
        print(format_table(summary))
    if todo:
        print(f"wrote {out}/regret.csv, summary.json, regret.png")
    else:
        run.say_complete("rebuilt regret.csv, summary.json and regret.png from them")
    return 0


def _write_outputs(parts: Parts, args: argparse.Namespace, matchups: list,
                   checkpoints: np.ndarray, extra: dict[str, Any]) -> dict[str, Any]:
    """Join the parts on disk (each checked by :meth:`Parts.read`) into regret.csv,
    summary.json (with ``extra``'s entries last) and regret.png; returns the summary."""
    out = parts.out
    summary: dict[str, Any] = {key: getattr(args, key) for key in SETTINGS}
    summary["gap"] = {"general_sum": "cce_gap", "sioux_falls": "relative_delay"}.get(
        args.game, "nash_conv")
    summary["matchups"] = {}
    parts.join("regret.csv", lambda writer: _join_parts(parts, args, matchups, checkpoints,
                                                        writer, summary))
    summary.update(extra)
    write_summary_json(out, summary)
    plot_games_csv(out)
    return summary


def _join_parts(parts: Parts, args: argparse.Namespace, matchups: list,
                checkpoints: np.ndarray, writer: Any, summary: dict[str, Any]) -> None:
    """Copy every part's rows to ``writer`` and add each matchup's results to ``summary``."""
    for i, (text, _) in enumerate(matchups):
        players = _players(args, text)
        finals: list[list[float]] = [[] for _ in players]
        gaps, seconds, compiling, seed_rounds = [], 0.0, 0.0, 0
        for block in parts.of(i):
            rows, values, meta = parts.read(block, _expected_rows(
                text, players, block, checkpoints))
            writer.writerows(rows)
            for row, value in zip(rows, values, strict=True):
                if int(row[4]) == args.steps:
                    finals[int(row[1]) - 1].append(value / args.steps)
            gaps += meta["gaps"]
            seconds += meta["wall_time_s"]
            compiling += meta.get("compile_time_s", 0.0)
            seed_rounds += meta["seed_rounds"]
        summary["matchups"][text] = {
            "learners": text.split(":"),
            "average_regret": [interval95(np.array(f)) for f in finals],
            "gap": interval95(np.array(gaps)),
            "wall_time_s": seconds, "compile_time_s": compiling,
            "seed_rounds_per_s": seed_rounds / max(seconds - compiling, 1e-9)}
        if args.game == "sioux_falls":  # per seed, the mean over the controlled players
            summary["matchups"][text]["mean_regret"] = interval95(
                np.mean(np.array(finals), axis=0))
        broken = ~np.isfinite(gaps) | ~np.all(np.isfinite(np.array(finals)), axis=0)
        if broken.any():
            sys.stderr.write(f"hyperx: warning: --matchups {text}: "
                             f"{plural(int(broken.sum()), 'seed')} of {broken.size} have a "
                             "NaN or infinite regret or gap (null in summary.json); check "
                             "--noise and the game's payoffs\n")


def format_table(summary: dict[str, Any]) -> str:
    """The summary as a fixed-width text table, one line per matchup."""
    routing = summary["game"] == "sioux_falls"
    regret = "mean R_i(T)/T (95% CI)" if routing else "R_1(T)/T (95% CI)"
    lines = [f"{'matchup':<28} {regret:>26} {summary['gap']:>18} {'seed-rounds/s':>14}"]
    for text, entry in summary["matchups"].items():
        band = format_interval(entry["mean_regret"] if routing else entry["average_regret"][0], 3)
        lines.append(f"{text:<28} {band:>26} {entry['gap']['mean']:>18.3f} "
                     f"{entry['seed_rounds_per_s']:>14.3g}")
    return "\n".join(lines)


def is_games_csv(path: Path) -> bool:
    """Whether ``path`` is the ``regret.csv`` of a ``hyperx games`` run (by its header)."""
    with open(path, newline="") as f:
        return next(csv.reader(f), None) == list(CSV_COLUMNS)


def plot_games_csv(directory: str | Path) -> Path:
    """Redraw ``regret.png`` of a games run from its ``regret.csv``; returns the path."""
    directory = Path(directory)
    path = directory / "regret.csv"
    curves: dict[str, dict[int, dict[int, float]]] = {}
    with open(path, newline="") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):
            try:
                if row["player"] == "1":
                    by_seed = curves.setdefault(row["matchup"], {}).setdefault(
                        int(row["seed"]), {})
                    by_seed[int(row["t"])] = float(row["regret"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: line {number} is not {','.join(CSV_COLUMNS)}: "
                                 f"{','.join(str(v) for v in row.values())}") from None
    if not curves:
        raise ValueError(f"{path}: holds no rows (nothing to plot)")
    t = np.array(sorted(next(iter(next(iter(curves.values())).values()))))
    averages = {}
    for text, seeds in curves.items():
        if any(sorted(s) != list(t) for s in seeds.values()):
            raise ValueError(f"{path}: the seeds of {text} do not share their checkpoints t")
        averages[text] = np.array([[s[x] for x in t] for s in seeds.values()]) / t
    plot_bands(t, averages, directory / "regret.png",
               ylabel="player 1's time-averaged regret R_1(t) / t")
    return directory / "regret.png"
