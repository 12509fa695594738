"""Freeway from the same initial weights: the authors' HyperAgent code against ours.

For each seed N: our ``hyperagent`` Atari agent's initial weights for a one-seed run with base
seed N (``agent.init(fold_in(PRNGKey(N), 0))``, what ``train_atari(..., seeds=1, seed=N)`` and
``benchmarks/atari_parity.py --only-seeds N`` start from) are

* (a) mapped to the authors' ``HyperAgentNet`` (``hyperagent_ref_env.reference_state``) and
  (b) loaded into their model inside THEIR ``run_atari.py`` run with ``run_HyperAgent.sh``'s
  arguments and ``--seed N --task FreewayNoFrameskip-v4`` (``hyperagent_ref_peer.py train``,
  in their venv; every run-time change is listed there);
* (d) trained by OUR trainer, ``hyperx.agents.atari.train_atari`` (envpool, one game, no
  evaluations: they do not touch the training stream), from the same weights.

(c) Every ``--every`` agent steps, for both codes (``seed{N}/progress_{ours,reference}.json``):
``q_std``, the standard deviation over the 64 probe indices of ``Q(s, a, z)``, per action,
averaged over the probe frames (``q_std_per_frame`` keeps each frame); ``up_share``, the share
of UP among the last ``--every`` training actions; ``first_reward_step``, the agent step of
the first non-zero training reward; the finished training games; the wall time. Both codes
act uniformly at random for their first 2000 steps, so ``up_share`` is about 1/3 there.

What is the same in the two runs of a seed: the weights (both networks give the same Q to
1.2e-7 at step 0: ``tests/agents/test_hyperagent_reference_weights.py``; the step-0 rows of
the two files agree), the probe, the hyperparameters (docs/atari.md, "Parity with the reference
code"). What is not: the random streams (their torch and NumPy generators seeded N, our JAX
keys: the 2000 random actions, the indices, the minibatches) and the emulator front end (their
gym wrappers on ale-py 0.8.1, our envpool: no-op starts 1-30 against 0-29, the resize), so
the two runs part from the first step: compare them over seeds, not step by step.

The probe (``probe.npz`` in ``--out-dir``, made once): the first frame stack of a Freeway game
on our envpool backend (the start frame) and 7 more, one every 50 steps of a uniformly random
trajectory, as ``benchmarks/atari_parity.fixed_action_share_at_init``; 64 probe indices and
256 scan indices, Gaussian N(0, I_4) from NumPy's generator seeded 0 (both codes read
``z / |z|``).

``--find-averse K``: the seeds 0 .. K-1 whose greedy action at the start frame is UP for at
most ``--averse-share`` of the 256 scan indices at initialisation ("UP-averse at init"),
written to ``averse.json``; with ``--seeds averse`` the run takes those seeds.

Outputs are per (seed, code): a finished one is skipped when the command is run again, an
unfinished one starts over (neither code's run is checkpointed). The two codes run one after
the other, never at once (this machine's two cores).

``--set KEY=VALUE`` (with ``--codes ours``, repeatable): ours with one configuration change,
one of :data:`VARIABLE` (the prior's scale or spread, the learned part's scale, the index
redraw rate, the index dimension, or the regulariser's ``beta``: ``beta=1.3020833e-05``, 0.01
over Freeway's 256 x 3 generated weights, turns our sum over them into the authors' mean),
into ``progress_ours-KEY=VALUE.json`` beside the published configuration's runs, measured
the same way (an ``index_dim`` change draws other weights and probe indices of that
dimension). ``--backend ale`` (with ``--codes ours``): ours on ale-py's
vector env instead of envpool (:mod:`hyperx.envs.atari` runs both), into
``progress_ours-backend=ale.json``: the emulator front end set apart from the agent.

``--streams S [S ...]``: each seed's weights with other random streams: a run keeps seed N's
initial weights (and, in ours, the Adam state and target they give) but takes everything drawn
after them from stream S (ours: the agent's key chain and the emulators of a run with base
seed S; theirs: ``--seed S``, their torch, NumPy and gym generators), into
``progress_{ours,reference}-stream=S.json``; the runs go stream by stream, each stream over
every seed. Whether a seed's failure belongs to its weights or to its draws.

``--pool SUMMARY ... --horizon H --summary PATH``: the runs of several summaries counted
together, who scored by step H (:func:`pool`).

``--summarise OUT_DIR``: the rates, intervals and tests over the seeds finished by both codes,
into ``benchmarks/results/freeway_same_init.json|png`` (:func:`summarise`; ``--summary PATH``
for another file).

Usage: ``nice python benchmarks/freeway_same_init.py --seeds 0 2 3 7 --steps 20000 --every 1000
--out-dir benchmarks/results/freeway_same_init`` (``--codes ours`` or ``reference`` for one).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hyperagent_ref_env  # noqa: E402

GAME = "Freeway"
ACTIONS = 3  # NOOP, UP, DOWN (ALE's minimal set)
UP = 1
RANDOM_STEPS = 2000  # both codes act uniformly at random before this agent step
PROBE_INDICES, SCAN_INDICES, PROBE_FRAMES = 64, 256, 8
CODES = ("reference", "ours")
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hyperagent_ref_peer.py")


def _write(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


def make_probe(path: str) -> dict[str, np.ndarray]:
    """The probe frames (8, 4, 84, 84) uint8 (frame 0: a game's start) and indices (64 probe,
    256 scan), written to ``path`` once and read back after."""
    if not os.path.exists(path):
        from hyperx.envs.atari import make_atari

        env = make_atari(GAME, num_envs=1, seed=0, training=True)
        obs, _ = env.reset(seed=0)
        frames = [np.asarray(obs)[0]]
        rng = np.random.default_rng(0)
        for t in range(50 * (PROBE_FRAMES - 1)):
            obs, *_ = env.step(rng.integers(0, ACTIONS, 1))
            if t % 50 == 49:
                frames.append(np.asarray(obs)[0])
        env.close()
        indices = np.random.default_rng(0).normal(
            size=(PROBE_INDICES + SCAN_INDICES, 4)).astype(np.float32)
        np.savez(path, frames=np.stack(frames).astype(np.uint8),
                 indices=indices[:PROBE_INDICES], scan_indices=indices[PROBE_INDICES:])
    with np.load(path) as f:
        return {k: np.array(f[k]) for k in f.files}


#: The configuration fields ``--set`` may change: the ones the HyperAgent paper's analysis
#: ties to exploration (the prior's scale and spread, the learned part's scale, the index
#: redraw rate and the index dimension) and the hypermodel regulariser's ``beta``, the one
#: term of the loss where ours and the authors' differ (a sum over the generated weights
#: against their mean; docs/atari.md's parity table).
VARIABLE = ("prior_scale", "prior_std", "posterior_scale", "redraw_prob", "index_dim", "beta")


def variant_name(changes: tuple[tuple[str, float], ...], backend: str = "envpool") -> str:
    """``ours`` for the published configuration on envpool, else
    ``ours-key=value[-key=value][-backend=ale]``."""
    return "-".join(["ours", *(f"{k}={v:g}" for k, v in changes),
                     *([] if backend == "envpool" else [f"backend={backend}"])])


def parse_changes(items: list[str]) -> tuple[tuple[str, float], ...]:
    """``["prior_scale=0.3"]`` -> ``(("prior_scale", 0.3),)`` (index_dim an int), sorted;
    ``ValueError`` naming the item when a key is not in :data:`VARIABLE` or a value is not a
    number."""
    changes = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in VARIABLE:
            raise ValueError(f"--set: expected KEY=VALUE with KEY one of {', '.join(VARIABLE)}, "
                             f"got {item!r}")
        try:
            changes[key] = int(value) if key == "index_dim" else float(value)
        except ValueError:
            raise ValueError(f"--set: expected a number for {key}, got {value!r}") from None
    return tuple(sorted(changes.items()))


@functools.lru_cache(maxsize=2)
def _network(changes: tuple[tuple[str, float], ...] = ()):
    import jax

    from hyperx.agents.config import get_config
    from hyperx.agents.core import make_head, make_torso
    from hyperx.heads import make_network

    config = get_config("hyperagent", env="atari", **dict(changes))
    network = make_network(make_head(config, ACTIONS, make_torso(config)))
    return config, jax.jit(network.apply)


def our_init(seed: int, changes: tuple[tuple[str, float], ...] = ()) -> tuple[dict, dict]:
    """(params, prior) of our ``hyperagent`` Atari agent at initialisation for base seed
    ``seed`` (the agent key ``fold_in(PRNGKey(seed), 0)``), with the configuration's
    ``changes`` (an ``index_dim`` change changes the weights' shapes, so their draw)."""
    import jax.numpy as jnp

    from hyperx.agents.core import make_agent
    from hyperx.agents.keys import run_key
    from hyperx.envs.atari import OBS_SHAPE

    config, _ = _network(changes)
    agent = make_agent(config, ACTIONS, jnp.zeros(OBS_SHAPE, jnp.uint8), step_budget=64)
    state = agent.init(run_key(seed, 0))
    return state.params, state.prior


def q_values(params: dict, prior: dict, frames: np.ndarray, indices: np.ndarray,
             changes: tuple[tuple[str, float], ...] = ()) -> np.ndarray:
    """Our ``Q(s_b, a, z_k)``, (B, K, A); ``indices`` (K, index_dim)."""
    import jax.numpy as jnp

    _, apply = _network(changes)
    return np.asarray(apply({"params": params, "prior": prior}, jnp.asarray(frames),
                            jnp.asarray(indices)))


def probe_indices(probe: dict, name: str, changes: tuple[tuple[str, float], ...] = ()
                  ) -> np.ndarray:
    """The probe's ``name`` indices ("indices" or "scan_indices"), or as many Gaussian draws
    of a changed ``index_dim`` (NumPy's generator seeded with that dimension)."""
    dim = dict(changes).get("index_dim", probe[name].shape[1])
    if dim == probe[name].shape[1]:
        return probe[name]
    draws = np.random.default_rng(dim).normal(size=(PROBE_INDICES + SCAN_INDICES, dim))
    draws = draws.astype(np.float32)
    return draws[:PROBE_INDICES] if name == "indices" else draws[PROBE_INDICES:]


def up_share_at_start(params: dict, prior: dict, probe: dict,
                      changes: tuple[tuple[str, float], ...] = ()) -> float:
    """Share of the 256 scan indices whose greedy action at the start frame is UP."""
    q = q_values(params, prior, probe["frames"][:1],
                 probe_indices(probe, "scan_indices", changes), changes)[0]  # (K, A)
    return float(np.mean(np.argmax(q, -1) == UP))


def find_averse(count: int, probe: dict, share: float, out_dir: str) -> list[int]:
    """Seeds ``0 .. count - 1`` whose UP share at the start frame is at most ``share``;
    every seed's share goes to ``averse.json``."""
    shares = {}
    for seed in range(count):
        shares[seed] = up_share_at_start(*our_init(seed), probe)
        print(f"seed {seed}: UP greedy for {shares[seed]:.3f} of {SCAN_INDICES} indices at the "
              f"start frame", flush=True)
    averse = [s for s, v in shares.items() if v <= share]
    _write(os.path.join(out_dir, "averse.json"),
           dict(threshold=share, indices=SCAN_INDICES, shares=shares, averse=averse))
    return averse


def _row(step: int, wall: float, params: dict, prior: dict, probe: dict,
         window: np.ndarray | None, changes: tuple[tuple[str, float], ...] = ()) -> dict:
    q = q_values(params, prior, probe["frames"], probe_indices(probe, "indices", changes),
                 changes)  # (F, K, A)
    spread = np.std(q, axis=1)
    return dict(step=step, wall_s=wall, q_std=spread.mean(0).tolist(),
                q_std_per_frame=spread.tolist(), q_mean=q.mean((0, 1)).tolist(),
                up_share=None if window is None or not len(window)
                else float(np.mean(window == UP)))


def run_name(code: str, stream: int | None) -> str:
    """``code`` for a run on the seed's own streams, else ``code-stream=S``."""
    return code if stream is None else f"{code}-stream={stream}"


def _weights_of(params: dict, prior: dict):
    """A stand-in for :func:`hyperx.agents.atari.initial_carry` that builds the carry of its
    own base seed (the key chain, the first acting index, the replay) and then puts ``params``
    (online and target, and the best-so-far copy) and ``prior`` into its one seed: Adam's
    state starts at zero whatever the weights."""
    import jax
    import jax.numpy as jnp

    from hyperx.agents import atari

    original = atari.initial_carry

    def initial_carry(program, first_obs, seed, num_evals):
        carry = original(program, first_obs, seed, num_evals)
        if program.num_seeds != 1:
            raise ValueError(f"one seed's weights: expected a one-seed run, got "
                             f"{program.num_seeds} seeds")
        lead = functools.partial(jax.tree.map, lambda x: jnp.asarray(x)[None])
        agent = carry.seeds.agent._replace(params=lead(params), target_params=lead(params),
                                           prior=lead(prior))
        return carry._replace(seeds=carry.seeds._replace(agent=agent),
                              evals=carry.evals._replace(best_params=lead(params)))

    return initial_carry


def run_ours(seed: int, steps: int, every: int, path: str, probe: dict,
             changes: tuple[tuple[str, float], ...] = (), backend: str = "envpool",
             stream: int | None = None) -> dict:
    """Our trainer on Freeway from our init for ``seed``, measured every ``every`` steps, with
    the configuration's ``changes`` (none: the published one), on the emulator ``backend``,
    drawing from the random streams of base seed ``stream`` (None: ``seed``'s own)."""
    from unittest import mock

    import jax

    from hyperx.agents import atari
    from hyperx.loop import Chunk

    config, _ = _network(changes)
    start = time.perf_counter()
    record = dict(code=run_name(variant_name(changes, backend), stream), seed=seed, game=GAME,
                  steps=steps, every=every, changes=dict(changes), backend=backend,
                  stream=seed if stream is None else stream, jax=jax.__version__,
                  rows=[], episodes=[], first_reward_step=None, done=False)
    params, prior = our_init(seed, changes)
    record["rows"].append(_row(0, 0.0, params, prior, probe, None, changes))
    record["init_up_share_at_start"] = up_share_at_start(params, prior, probe, changes)
    _write(path, record)

    def on_chunk(chunk: Chunk) -> None:
        agent = chunk.carry.seeds.agent  # leading seed axis of 1, stream 0 (one game)
        first_seed = functools.partial(jax.tree.map, lambda x: np.asarray(x[0]))
        params, prior = first_seed(agent.params), first_seed(agent.prior)
        stored = int(np.asarray(agent.replay.stream_added)[0, 0])
        if stored > agent.replay.data["action"].shape[2]:
            raise RuntimeError(f"the replay wrapped ({stored} transitions); measure with "
                               f"steps <= buffer_size")
        data = {k: np.asarray(agent.replay.data[k][0, 0, :stored])
                for k in ("action", "reward", "first")}
        # envpool spends one iteration on each reset, which stores nothing: a stored slot j
        # is agent step j + 1 plus the games started before it (after the first).
        step_of = np.arange(1, stored + 1) + np.cumsum(data["first"]) - 1
        nonzero = np.flatnonzero(data["reward"] != 0)
        if record["first_reward_step"] is None and nonzero.size:
            record["first_reward_step"] = int(step_of[nonzero[0]])
        record["episodes"].extend(dict(step=e["env_step"], score=e["score"])
                                  for e in chunk.metrics["episodes"])
        record["rows"].append(_row(chunk.done, time.perf_counter() - start, params, prior,
                                   probe, data["action"][-every:], changes))
        record["rows"][-1]["steps_per_s"] = chunk.metrics["steps_per_s"]
        _write(path, record)

    with mock.patch.object(atari, "initial_carry", _weights_of(params, prior)):
        atari.train_atari(config, GAME, steps=steps, seeds=1,
                          seed=seed if stream is None else stream, eval_episodes=0,
                          backend=backend, eval_every=steps, chunk_steps=every,
                          on_chunk=on_chunk)
    record["done"], record["wall_s"] = True, time.perf_counter() - start
    _write(path, record)
    return record


def run_reference(seed: int, steps: int, every: int, path: str, probe_path: str,
                  threads: int, stream: int | None = None) -> dict:
    """The authors' run_atari.py on Freeway from our init for ``seed`` (their venv), with
    ``--seed stream`` (None: ``seed``)."""
    python, checkout = hyperagent_ref_env.ensure()
    folder = os.path.dirname(path)
    state = os.path.join(folder, "init_reference_state.npz")
    hyperagent_ref_env.save_state(state, *our_init(seed))
    log_name = f"{run_name('reference', stream)}_stdout.log"
    with open(os.path.join(folder, log_name), "w") as log:
        subprocess.run([python, PEER, "train", "--checkout", checkout, "--state", state,
                        "--probe", probe_path, "--out", path,
                        "--seed", str(seed if stream is None else stream),
                        "--steps", str(steps), "--every", str(every), "--game", GAME,
                        "--threads", str(threads)],
                       check=True, env=hyperagent_ref_env.environ(), stdout=log,
                       stderr=subprocess.STDOUT)
    with open(path) as f:
        record = json.load(f)
    record["versions"] = hyperagent_ref_env.versions(python)
    record["code"], record["seed"] = run_name("reference", stream), seed
    record["stream"] = seed if stream is None else stream
    _write(path, record)
    return record


def _done(path: str) -> bool:
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return bool(json.load(f).get("done"))


def _summary(record: dict) -> str:
    rows = record["rows"]
    last = rows[-1]
    rate = ""
    for phase, span in (("learning (after step 2000)", [r for r in rows if r["step"] >= 2000]),
                        ("random (after the first measurement)",
                         [r for r in rows if 0 < r["step"] <= 2000])):
        if len(span) >= 2:
            seconds = span[-1]["wall_s"] - span[0]["wall_s"]
            rate += (f", {phase}: {1000 * seconds / (span[-1]['step'] - span[0]['step']):.1f}"
                     " s per 1000 steps")
    return (f"step {last['step']}: q_std {np.round(last['q_std'], 5).tolist()}, up_share "
            f"{last['up_share']}, first reward at {record['first_reward_step']}{rate}")


def _scores(record: dict) -> list[tuple[int, float]]:
    """(agent step, score) of each finished training game (the authors' runner logs the
    clipped return, Freeway's score: its rewards are 0 or 1)."""
    return [(e["step"], e.get("score", e.get("clipped_return"))) for e in record["episodes"]]


def _paired_tests(a: list[int | None], b: list[int | None], name_a: str, name_b: str) -> dict:
    """On paired seeds (``a[i]``, ``b[i]``: seed i's first-reward step, None if it never
    scored): the 2x2 table of scoring (``name_a`` rows, ``name_b`` columns; first row/column:
    scored), the exact McNemar p on the seeds where one scores and the other does not,
    Fisher's exact p on the two rates, and the sign test on which code scored FIRST (a run
    that never scores counts as later than any that does; a seed where neither scores, or
    both at the same step, decides nothing): it uses the seeds where both score as well."""
    from scipy import stats

    never = float("inf")
    steps = [(never if x is None else x, never if y is None else y)
             for x, y in zip(a, b, strict=True)]
    pairs = [(x < never, y < never) for x, y in steps]
    table = [[pairs.count((True, True)), pairs.count((True, False))],
             [pairs.count((False, True)), pairs.count((False, False))]]
    discordant = table[0][1] + table[1][0]
    a_first, b_first = sum(x < y for x, y in steps), sum(y < x for x, y in steps)
    return {f"paired_table_{name_a}_rows_{name_b}_columns": table,
            "mcnemar_exact_p": float(stats.binomtest(table[0][1], discordant).pvalue)
            if discordant else 1.0,
            "fisher_exact_p": _fisher(_rate([x for x, _ in pairs]), _rate([y for _, y in pairs])),
            f"seeds_{name_a}_scored_first": a_first, f"seeds_{name_b}_scored_first": b_first,
            "first_reward_sign_test_p": float(stats.binomtest(a_first, a_first + b_first).pvalue)
            if a_first + b_first else 1.0}


def _rate(scored: list[bool]) -> dict:
    from scipy import stats

    k, n = sum(scored), len(scored)
    ci = stats.binomtest(k, n).proportion_ci(method="exact")
    return dict(seeds_scoring=k, seeds=n, rate=k / n, rate_ci95=[ci.low, ci.high])


def _first_learning_window(records: dict[int, dict[str, dict]], seeds: list[int]) -> dict:
    """The first measurement after the random start (the ``--every`` steps from step 2000,
    the first greedy ones): per seed and code, the share of UP among those training actions,
    the probe's UP advantage (the mean over probe frames and indices of ``Q(s, UP, z)`` less
    the mean of the other actions') and whether the code had scored by then; over the seeds
    where neither had, the sign tests of the reference above ours in each. Exploratory: the
    window was chosen after the runs were read, so a small p here is a lead, not a finding."""
    from scipy import stats

    per_seed, unscored = {}, []
    for s in seeds:
        rows = {c: [r for r in records[s][c]["rows"] if r["step"] > RANDOM_STEPS] for c in CODES}
        if not all(rows.values()) or rows["ours"][0]["step"] != rows["reference"][0]["step"]:
            continue
        step = rows["ours"][0]["step"]
        entry = {"step": step}
        for code in CODES:
            q = np.asarray(rows[code][0]["q_mean"])
            first = records[s][code]["first_reward_step"]
            entry[code] = dict(up_share=rows[code][0]["up_share"],
                               up_advantage=float(q[UP] - np.delete(q, UP).mean()),
                               scored_by_then=first is not None and first <= step)
        per_seed[str(s)] = entry
        if not (entry["ours"]["scored_by_then"] or entry["reference"]["scored_by_then"]):
            unscored.append(s)
    out: dict = dict(per_seed=per_seed, seeds_neither_scored=unscored)
    for key in ("up_share", "up_advantage"):
        pairs = [(per_seed[str(s)]["reference"][key], per_seed[str(s)]["ours"][key])
                 for s in unscored]
        above, below = sum(r > o for r, o in pairs), sum(r < o for r, o in pairs)
        out[f"{key}_reference_above_ours"] = [above, above + below]
        out[f"{key}_sign_test_p"] = (float(stats.binomtest(above, above + below).pvalue)
                                     if above + below else 1.0)
    return out


def _variants(out_dir: str, records: dict[int, dict[str, dict]]) -> dict:
    """Each changed configuration of ours (``progress_ours-*.json``, ``--set``) over the
    paired seeds it finished: its rate, and its paired tests against the published
    configuration and against the reference."""
    found: dict[str, dict[int, dict]] = {}
    for seed in records:
        folder = os.path.join(out_dir, f"seed{seed}")
        for file in sorted(os.listdir(folder)):
            name = file[len("progress_"):-len(".json")]
            if (name.startswith("ours-") and "stream=" not in name and file.endswith(".json")
                    and _done(os.path.join(folder, file))):
                with open(os.path.join(folder, file)) as f:
                    found.setdefault(name, {})[seed] = json.load(f)
    out = {}
    for name, runs in sorted(found.items()):
        seeds = sorted(runs)
        firsts = [runs[s]["first_reward_step"] for s in seeds]
        scored = [step is not None for step in firsts]
        out[name] = dict(changes=runs[seeds[0]]["changes"],
                         backend=runs[seeds[0]].get("backend", "envpool"),
                         paired_seeds=seeds, **_rate(scored),
                         first_reward_step={str(s): runs[s]["first_reward_step"] for s in seeds})
        for code in CODES:
            other = [records[s][code]["first_reward_step"] for s in seeds]
            out[name][f"against_{code}"] = _paired_tests(firsts, other, "variant", code)
    return out


def _streams(out_dir: str) -> dict:
    """The runs of ``--streams`` (``progress_{ours,reference}-stream=S.json``): per seed, the
    streams both codes finished, each code's first-reward steps and rate over them, and
    Fisher's exact test of equal rates; then the same pooled over every (seed, stream) run
    (the design gives both codes the same streams of the same seeds). A stream is not a pair
    across the codes (their generators differ), so there is no paired test. The rates'
    ``seeds`` and ``seeds_scoring`` count runs here."""
    per_seed, pooled = {}, {code: [] for code in CODES}
    for folder in sorted(os.listdir(out_dir), key=lambda f: (len(f), f)):
        if not folder.startswith("seed") or not os.path.isdir(os.path.join(out_dir, folder)):
            continue
        runs: dict[str, dict[int, int | None]] = {code: {} for code in CODES}
        steps: dict[str, dict[int, int]] = {code: {} for code in CODES}
        for file in os.listdir(os.path.join(out_dir, folder)):
            code, sep, stream = file[len("progress_"):-len(".json")].partition("-stream=")
            path = os.path.join(out_dir, folder, file)
            if sep and code in CODES and file.startswith("progress_") and _done(path):
                with open(path) as f:
                    record = json.load(f)
                runs[code][int(stream)] = record["first_reward_step"]
                steps[code][int(stream)] = record["steps"]
        streams = sorted(set(runs["ours"]) & set(runs["reference"]))
        if not streams:
            continue
        entry: dict = dict(streams=streams, steps=sorted({
            steps[code][s] for code in CODES for s in streams}))
        for code in CODES:
            firsts = [runs[code][s] for s in streams]
            pooled[code].extend(firsts)
            entry[code] = dict(first_reward_step=dict(zip(map(str, streams), firsts,
                                                          strict=True)),
                               **_rate([f is not None for f in firsts]))
        entry["fisher_exact_p"] = _fisher(entry["ours"], entry["reference"])
        per_seed[folder[4:]] = entry
    if not per_seed:
        return {}
    rates = {code: _rate([f is not None for f in pooled[code]]) for code in CODES}
    return dict(per_seed=per_seed, pooled=dict(**rates,
                                               fisher_exact_p=_fisher(*rates.values())))


def _fisher(a: dict, b: dict) -> float:
    """Fisher's exact p (two-sided) on two :func:`_rate` results."""
    from scipy import stats

    return float(stats.fisher_exact(
        [[a["seeds_scoring"], a["seeds"] - a["seeds_scoring"]],
         [b["seeds_scoring"], b["seeds"] - b["seeds_scoring"]]]).pvalue)


def pool(summaries: list[str], horizon: int, path: str) -> dict:
    """Every run of the summaries (``--summarise`` outputs: the pairs' ``per_seed`` and the
    ``streams``) counted together: per code, the runs that scored by agent step ``horizon``
    (runs shorter than it are refused), the rate with its interval and Fisher's exact test;
    per summary the same counts; over the summaries' seed pairs (same weights, both codes)
    the paired tests of :func:`_paired_tests` by the horizon. A description across designs,
    not a test: runs from one seed's weights are not independent. Writes ``path`` (JSON)."""
    firsts: dict[str, dict[str, list]] = {}
    pairs: list[dict] = []
    for summary in summaries:
        with open(summary) as f:
            data = json.load(f)
        length = min([data.get("steps", horizon), *(
            step for entry in data.get("streams", {}).get("per_seed", {}).values()
            for step in entry["steps"])])
        if length < horizon:
            raise SystemExit(f"--pool: {summary} holds runs of {length} steps, shorter than "
                             f"--horizon {horizon}")
        pairs.extend(data.get("per_seed", {}).values())
        firsts[summary] = {code: [entry[code]["first_reward_step"]
                                  for entry in data.get("per_seed", {}).values()]
                           + [step for entry in data.get("streams", {}).get("per_seed", {})
                              .values() for step in entry[code]["first_reward_step"].values()]
                           for code in CODES}

    def rates(runs: dict[str, list]) -> dict:
        out = {code: _rate([f is not None and f <= horizon for f in runs[code]])
               for code in CODES}
        return dict(**out, fisher_exact_p=_fisher(out["ours"], out["reference"]))

    def by_horizon(step: int | None) -> int | None:
        return step if step is not None and step <= horizon else None

    out = dict(horizon=horizon, summaries={k: rates(v) for k, v in firsts.items()},
               pooled=rates({code: [f for runs in firsts.values() for f in runs[code]]
                             for code in CODES}))
    if pairs:
        out["paired"] = dict(seeds=len(pairs), **_paired_tests(
            *([by_horizon(entry[code]["first_reward_step"]) for entry in pairs]
              for code in ("ours", "reference")), "ours", "reference"))
    _write(path, out)
    return out


def summarise(out_dir: str, path: str) -> dict:
    """Both codes' rates over the seeds that finished with both: a seed *scores* when its
    first non-zero training reward comes within the run; the rates with Clopper-Pearson 95%
    intervals, Fisher's exact test of equal rates, the exact McNemar test on the seeds
    where the codes disagree (the same weights make the seeds pairs) and the sign test on
    which code scored first (:func:`_paired_tests`); the first greedy steps
    (:func:`_first_learning_window`); each changed configuration of ours likewise
    (:func:`_variants`); the seeds' weights on other streams (:func:`_streams`). Writes
    ``path`` (JSON) and the figure beside it (``.png``); a folder holding only stream runs
    gets the streams' summary alone, and no figure."""
    records: dict[int, dict[str, dict]] = {}
    for folder in sorted(os.listdir(out_dir)):
        if not folder.startswith("seed"):
            continue
        pair = {}
        for code in CODES:
            file = os.path.join(out_dir, folder, f"progress_{code}.json")
            if _done(file):
                with open(file) as f:
                    pair[code] = json.load(f)
        if len(pair) == len(CODES):
            records[int(folder[4:])] = pair
    streams = _streams(out_dir)
    if not records:
        if not streams:
            raise SystemExit(f"no seed in {out_dir} has finished with both codes")
        out = dict(game=GAME, streams=streams)
        _write(path, out)
        return out
    seeds = sorted(records)
    steps = {records[s][c]["steps"] for s in seeds for c in CODES}
    if len(steps) != 1:
        raise SystemExit(f"the finished runs have different lengths: {sorted(steps)}")
    length = steps.pop()
    out = dict(game=GAME, steps=length, seeds=seeds, per_seed={}, codes={},
               command=f"python benchmarks/freeway_same_init.py --seeds {' '.join(map(str, seeds))}"
                       f" --steps {length} --every 1000 --out-dir OUT, then "
                       "--summarise OUT")
    for code in CODES:
        scored = [records[s][code]["first_reward_step"] is not None for s in seeds]
        finals = [max([v for _, v in _scores(records[s][code])[-2:]], default=0.0)
                  for s in seeds]
        out["codes"][code] = dict(**_rate(scored),
                                  mean_best_of_last_two_games=float(np.mean(finals)),
                                  versions={key: records[seeds[0]][code].get(key)
                                            for key in ("jax", "torch", "gym")
                                            if key in records[seeds[0]][code]})
    for s in seeds:
        out["per_seed"][str(s)] = {
            "init_up_share_at_start": records[s]["ours"].get("init_up_share_at_start"),
            **{code: dict(first_reward_step=records[s][code]["first_reward_step"],
                          last_scores=[v for _, v in _scores(records[s][code])[-3:]],
                          up_share=[r["up_share"] for r in records[s][code]["rows"]],
                          q_std_up=[r["q_std"][UP] for r in records[s][code]["rows"]])
               for code in CODES}}
    out["tests"] = _paired_tests(*([records[s][code]["first_reward_step"] for s in seeds]
                                   for code in ("ours", "reference")), "ours", "reference")
    out["first_learning_window"] = _first_learning_window(records, seeds)
    out["variants"] = _variants(out_dir, records)
    out["streams"] = streams
    _write(path, out)
    _plot(records, seeds, os.path.splitext(path)[0] + ".png")
    return out


def _plot(records: dict, seeds: list[int], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    colours = {"ours": "tab:blue", "reference": "tab:orange"}
    for code in CODES:
        for i, s in enumerate(seeds):
            rows = records[s][code]["rows"]
            label = code if i == 0 else None
            kw = dict(color=colours[code], alpha=0.6, lw=1, label=label)
            axes[0].plot([r["step"] for r in rows[1:]], [r["up_share"] for r in rows[1:]], **kw)
            axes[1].plot([r["step"] for r in rows], [r["q_std"][UP] for r in rows], **kw)
            games = _scores(records[s][code])
            axes[2].plot([g for g, _ in games], [v for _, v in games], marker=".", **kw)
        steps = records[seeds[0]][code]["steps"]
        firsts = sorted(records[s][code]["first_reward_step"] for s in seeds
                        if records[s][code]["first_reward_step"] is not None)
        axes[3].step([0, *firsts, steps], [0, *range(1, len(firsts) + 1), len(firsts)],
                     where="post", color=colours[code], label=code)
    axes[3].set_ylim(-0.2, len(seeds) + 0.2)
    for ax, title in zip(axes, ("share of UP in the last 1000 training actions",
                                "std over 64 indices of Q(s, UP, z), mean of 8 probe frames",
                                "training game score",
                                f"seeds with a reward by this step (of {len(seeds)})"),
                         strict=True):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("agent step")
        ax.legend(fontsize=8)
    axes[1].set_yscale("log")
    fig.suptitle(f"Freeway from the same initial weights, seeds {seeds}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["averse"],
                        help="seed numbers, or 'averse' (those --find-averse finds)")
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps per run")
    parser.add_argument("--every", type=int, default=1000, help="agent steps per measurement")
    parser.add_argument("--codes", nargs="+", choices=CODES, default=list(CODES))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="run ours with this configuration change (repeatable; with "
                             f"--codes ours; KEY one of {', '.join(VARIABLE)}), into "
                             "progress_ours-KEY=VALUE.json")
    parser.add_argument("--backend", choices=("envpool", "ale"), default="envpool",
                        help="ours: the emulator front end (ale: ale-py's vector env, as "
                             "hyperx.envs.atari runs it), into progress_ours-backend=ale.json")
    parser.add_argument("--streams", nargs="+", type=int, metavar="S",
                        help="keep each seed's initial weights but draw from base seed S's "
                             "random streams, into progress_CODE-stream=S.json (the runs go "
                             "stream by stream over the seeds)")
    parser.add_argument("--find-averse", type=int, default=16, metavar="K",
                        help="with --seeds averse: scan seeds 0 .. K-1")
    parser.add_argument("--averse-share", type=float, default=0.05,
                        help="UP-averse: UP greedy for at most this share of the 256 indices")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads in the authors' run (their default is "
                             "the number of cores; on this shared two-core machine 2 threads "
                             "took 2.6 s per learning step against 0.085 s with 1)")
    parser.add_argument("--out-dir", default="benchmarks/results/freeway_same_init")
    parser.add_argument("--summarise", metavar="OUT_DIR",
                        help="write --summary (JSON, and the figure beside it) from the seeds "
                             "of OUT_DIR finished by both codes, and stop")
    parser.add_argument("--pool", nargs="+", metavar="SUMMARY",
                        help="count the runs of these --summarise outputs together (who "
                             "scored by --horizon) into --summary, and stop")
    parser.add_argument("--horizon", type=int, default=5000,
                        help="with --pool: a run scores when its first reward comes by this "
                             "agent step")
    parser.add_argument("--summary",
                        help="with --summarise or --pool: the JSON file to write (with "
                             "--summarise, default benchmarks/results/freeway_same_init.json)")
    args = parser.parse_args()
    if args.pool:
        if args.summary is None:
            parser.error("--pool: expected --summary PATH, the file to write")
        if args.horizon < 1:
            parser.error(f"--horizon: expected a positive step, got {args.horizon}")
        result = pool(args.pool, args.horizon, args.summary)
        print(json.dumps(result["pooled"], indent=1))
        return
    if args.summarise:
        result = summarise(args.summarise, args.summary or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "results", "freeway_same_init.json"))
        print(json.dumps({k: result[k] for k in ("seeds", "codes", "tests", "streams")
                          if k in result}, indent=1))
        return
    if args.steps < 1 or args.every < 1 or args.steps % args.every:
        parser.error(f"expected --every to divide --steps (both positive), got --every "
                     f"{args.every} --steps {args.steps}")
    if args.steps > 100_000:
        parser.error(f"--steps: at most 100000 (the replay our measurement reads holds "
                     f"buffer_size transitions), got {args.steps}")
    if args.threads < 1:
        parser.error(f"--threads: expected a positive number, got {args.threads}")
    try:
        changes = parse_changes(args.set)
    except ValueError as error:
        parser.error(str(error))
    if (changes or args.backend != "envpool") and args.codes != ["ours"]:
        parser.error(f"--set and --backend change our run only: expected --codes ours, got "
                     f"--codes {' '.join(args.codes)}")
    if changes:
        from hyperx.agents.config import get_config

        try:
            get_config("hyperagent", env="atari", **dict(changes))
        except ValueError as error:
            parser.error(f"--set: {error}")
    if not 0 <= args.averse_share <= 1:
        parser.error(f"--averse-share: expected a share in [0, 1], got {args.averse_share}")
    averse = args.seeds == ["averse"]
    if not averse:
        try:
            seeds = [int(s) for s in args.seeds]
        except ValueError:
            parser.error(f"--seeds: expected integers or 'averse', got {args.seeds}")
        if min(seeds) < 0:
            parser.error(f"--seeds: expected non-negative seeds, got {seeds}")
    elif args.find_averse < 1:
        parser.error(f"--find-averse: expected a positive count, got {args.find_averse}")
    if args.streams is not None and min(args.streams) < 0:
        parser.error(f"--streams: expected non-negative seeds, got {args.streams}")
    os.makedirs(args.out_dir, exist_ok=True)
    probe_path = os.path.join(args.out_dir, "probe.npz")
    probe = make_probe(probe_path)
    if averse:
        seeds = find_averse(args.find_averse, probe, args.averse_share, args.out_dir)
        print(f"UP-averse at init: {seeds}", flush=True)
    for stream in args.streams or [None]:
        for seed in seeds:
            folder = os.path.join(args.out_dir, f"seed{seed}")
            os.makedirs(folder, exist_ok=True)
            for code in args.codes:
                ours = code == "ours"
                code = run_name(variant_name(changes, args.backend) if ours else code, stream)
                path = os.path.join(folder, f"progress_{code}.json")
                if _done(path):
                    print(f"seed {seed} {code}: done, skipping", flush=True)
                    continue
                print(f"seed {seed} {code}: {args.steps} steps", flush=True)
                if ours:
                    record = run_ours(seed, args.steps, args.every, path, probe, changes,
                                      args.backend, stream)
                else:
                    record = run_reference(seed, args.steps, args.every, path, probe_path,
                                           args.threads, stream)
                print(f"seed {seed} {code}: {_summary(record)}", flush=True)


if __name__ == "__main__":
    main()
