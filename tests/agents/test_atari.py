"""The Atari training loop on real ROMs: compiled vs host loop, every config, resume,
seeds sharded over devices."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from hyperx.agents import get_config
from hyperx.agents.atari import GAMES_FILE, saved_games, train_atari
from hyperx.agents.config import AGENT_NAMES
from hyperx.commands import main
from hyperx.commands.atari import RunLog, write_games
from hyperx.loop import Chunk

SMALL = dict(buffer_size=400, learning_starts=64)


def leaves_equal(a, b) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.mark.slow
def test_compiled_and_host_loops_store_the_same_transitions():
    """Same seed, learning off (so actions depend only on the keys and initial network): the
    compiled XLA loop and the gymnasium host loop fill the replay identically."""
    config = get_config("hyperagent", env="atari", buffer_size=400, learning_starts=10**6)
    runs = [train_atari(config, "Breakout", steps=160, seeds=1, envs_per_seed=2,
                        eval_episodes=0, host_loop=host) for host in (False, True)]
    compiled, host = (r.carry.seeds.agent.replay for r in runs)
    assert int(compiled.num_added[0]) > 100  # 160 steps minus any autoreset steps
    assert leaves_equal(compiled, host)
    assert runs[0].episodes == runs[1].episodes


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) for n in AGENT_NAMES])
def test_every_atari_config_trains_a_few_hundred_steps_without_nan(name):
    config = get_config(name, env="atari", **SMALL)
    result = train_atari(config, "Breakout", steps=256, seeds=1, envs_per_seed=4,
                         eval_episodes=0)
    agent = result.carry.seeds.agent
    assert int(agent.grad_steps[0]) > 0
    assert np.isfinite(np.asarray(agent.loss)).all()
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(agent.params))
    assert result.steps_done == 256


@pytest.mark.slow
def test_resume_restores_the_learner_and_evaluations_bit_for_bit(tmp_path):
    config = get_config("hyperagent", env="atari", **SMALL)
    kwargs = dict(steps=160, seeds=2, envs_per_seed=1, eval_every=80, eval_episodes=1,
                  eval_max_steps=60, checkpoint_dir=str(tmp_path / "ckpt"))
    first = train_atari(config, "Breakout", max_chunks=1, **kwargs)
    assert first.steps_done == 80 and int(first.carry.evals.count) == 1
    scores = np.asarray(first.carry.evals.scores[0])
    assert [b["score"] for b in first.best] == list(scores)
    restored = train_atari(config, "Breakout", max_chunks=0, **kwargs)
    assert restored.steps_done == 80
    assert leaves_equal(first.carry.seeds.agent, restored.carry.seeds.agent)
    assert leaves_equal(first.carry.seeds.key, restored.carry.seeds.key)
    assert leaves_equal(first.carry.evals, restored.carry.evals)
    assert (tmp_path / "ckpt" / GAMES_FILE).exists()
    assert restored.episodes == first.episodes
    # Emulators are not saved: the resumed streams start new games.
    assert np.asarray(restored.carry.seeds.first).all()


def test_saved_games_are_those_up_to_the_restored_step(tmp_path):
    """The games file may run one chunk ahead of the restored checkpoint, never behind."""
    assert saved_games(str(tmp_path), 100) == []
    games = [dict(seed=s, env=0, env_step=step, score=float(step), length=7)
             for step in (40, 80, 120) for s in (0, 1)]
    (tmp_path / GAMES_FILE).write_text(json.dumps(games))
    assert saved_games(str(tmp_path), 80) == games[:4]
    assert saved_games(str(tmp_path), 0) == []


def test_resumed_cli_log_appends_and_the_end_rewrites_the_games(tmp_path):
    def chunk(step, start):
        return Chunk(step, 30, None, dict(
            episodes=[dict(seed=0, env=0, env_step=step, score=1.0, length=5)],
            scores=np.ones((1, 1)), loss=np.zeros(1), steps_per_s=10.0), start)

    def rows(name):
        return (tmp_path / f"{name}.csv").read_text().splitlines()

    log = RunLog(tmp_path, 1, progress=False, total=30)
    log(chunk(10, 0))
    log.close()
    log = RunLog(tmp_path, 1, progress=False, total=30, resume=True)
    log(chunk(20, 10))
    log.close()
    for name in ("episodes", "evaluations", "metrics"):
        assert len(rows(name)) == 3 and rows(name)[0].startswith(("seed", "env_step")), name
        assert rows(name)[1].split(",")[:3] != rows(name)[2].split(",")[:3], name
    # The newest checkpoint (step 20) was damaged: the run resumes from step 10 again, and the
    # rows the interrupted run wrote past it are dropped before the chunk's are appended.
    before = {name: rows(name) for name in ("episodes", "evaluations", "metrics")}
    log = RunLog(tmp_path, 1, progress=False, total=30, resume=True)
    log(chunk(20, 10))
    log(chunk(30, 10))
    log.close()
    for name, old in before.items():
        assert rows(name)[:3] == old and len(rows(name)) == 4, name
        steps = [row.split(",")[2 if name == "episodes" else 0 if name == "metrics" else 1]
                 for row in rows(name)[1:]]
        assert steps == ["10", "20", "30"], (name, steps)
    # A chunk that finished after its checkpoint but before its log line: the result holds it.
    games = [dict(seed=0, env=0, env_step=s, score=1.0, length=5) for s in (10, 15, 20)]
    result = SimpleNamespace(episodes=games, evaluations=[dict(seed=0, env_step=20, score=2.0)],
                             games=("Breakout",))
    write_games(tmp_path, result)
    rows = (tmp_path / "episodes.csv").read_text().splitlines()
    assert rows == ["seed,env,env_step,score,length", "0,0,10,1.0,5", "0,0,15,1.0,5",
                    "0,0,20,1.0,5"]
    assert (tmp_path / "evaluations.csv").read_text().splitlines()[1:] == ["0,20,2.0"]


@pytest.mark.parametrize("argv, message", [
    (["--game", "Tetris2"], "--game: expected an Atari game"),
    (["--game", "breakout2"], "did you mean Breakout?"),
    (["--backend", "gym"], "argument --backend: invalid choice: 'gym' (choose from"),
    (["--agent", "ppo"], "argument --agent: invalid choice: 'ppo' (choose from"),
    (["--envs-per-seed", "0"], "--envs-per-seed"),
    (["--steps", "4", "--envs-per-seed", "8"], "--envs-per-seed: expected at most"),
    (["--agent", "hyperdqn", "--envs-per-seed", "3"], "--envs-per-seed: expected a multiple"),
    (["--game", "Breakout", "Pong", "--seeds", "3"], "--seeds: expected a multiple of the 2 games"),
    (["--game", "Breakout", "Pongg"], "--game: expected an Atari game"),
])
def test_cli_bad_arguments_are_one_line_errors(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["atari", *argv, "--steps", argv[argv.index("--steps") + 1] if "--steps" in argv
              else "64", "--out", str(tmp_path / "run"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.slow
def test_cli_writes_metrics_tensorboard_summary_and_plot(tmp_path):
    out = tmp_path / "run"
    argv = ["atari", "--game", "Pong", "--agent", "dqn", "--steps", "256", "--envs-per-seed",
            "4", "--eval-every", "128", "--eval-episodes", "1", "--learning-starts", "64",
            "--buffer-size", "512", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    for name in ("episodes.csv", "evaluations.csv", "metrics.csv", "summary.json",
                 "returns.png"):
        assert (out / name).exists(), name
    assert any((out / "tb").iterdir())


@pytest.mark.slow
def test_cli_trains_several_games_with_the_progress_bar_and_evaluates_them_again(tmp_path,
                                                                                 capsys):
    """``--game Breakout Pong --seeds 2`` as a user types it (progress bar on): every CSV gains
    a game column, the summary a mean per game, and ``--eval-only`` and ``hyperx plot`` read
    the run back."""
    out = tmp_path / "run"
    argv = ["atari", "--game", "breakout", "Pong", "--seeds", "2", "--agent", "dqn",
            "--steps", "128", "--eval-every", "64", "--eval-episodes", "1",
            "--eval-max-steps", "40", "--learning-starts", "64", "--buffer-size", "400",
            "--checkpoint", "--out", str(out)]
    assert main(argv) == 0
    assert "dqn on Breakout, Pong, 2 seeds" in capsys.readouterr().out
    for name in ("episodes", "evaluations", "metrics"):
        header, *rows = (out / f"{name}.csv").read_text().splitlines()
        assert header.endswith(",game"), header
        assert {r.rsplit(",", 1)[1] for r in rows} <= {"Breakout", "Pong"}
    evaluations = (out / "evaluations.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] + r.rsplit(",", 1)[1] for r in evaluations[:2]] == [
        "0Breakout", "1Pong"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["game"] == ["Breakout", "Pong"]
    assert set(summary["final_score_mean_per_game"]) == {"Breakout", "Pong"}
    assert main(["atari", "--eval-only", "--out", str(out), "--quiet"]) == 0
    saved = json.loads((out / "eval_only.json").read_text())
    assert np.array(saved["scores"]).shape == (2, 1)
    (out / "returns.png").unlink()
    assert main(["plot", str(out)]) == 0 and (out / "returns.png").exists()


@pytest.mark.slow
def test_cli_ctrl_c_leaves_a_resumable_run_and_no_temporary_files(tmp_path):
    """SIGINT once the first chunk is logged: exit 130 with one line naming the checkpoint and
    --resume, no orbax temporaries; --resume then finishes the run from that checkpoint."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "hyperx", "atari", "--game", "Pong", "--agent", "dqn",
            "--steps", "512", "--envs-per-seed", "4", "--eval-every", "64",
            "--eval-episodes", "0", "--learning-starts", "64", "--buffer-size", "512",
            "--checkpoint", "--quiet", "--out", str(out)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    metrics = out / "metrics.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not (
            metrics.exists() and len(metrics.read_text().splitlines()) > 1):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    line = [x for x in err.splitlines() if x.strip()][-1]
    assert line.startswith("hyperx: interrupted: after env step ") and "--resume" in line, line
    assert "of 512 per seed" in line and "checkpoint of env step" in line, line
    assert not [p for p in out.rglob("*") if "tmp" in p.name], list(out.rglob("*"))
    assert json.loads((out / "run.json").read_text())["complete"] is False

    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "run.json").read_text())["complete"] is True
    assert json.loads((out / "summary.json").read_text())["env_steps_per_seed"] == 512


@pytest.mark.slow
def test_atari_page_code_runs(tmp_path, monkeypatch):
    """docs/atari.md: python blocks run in order, hyperx commands parse (as tests/test_docs.py
    does for the other pages; this page compiles a training loop, so it runs here)."""
    import pathlib
    import re
    import shlex

    from hyperx.commands import build_parser

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "atari.md"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs"}
    for lang, code in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.M | re.S):
        assert lang in ("python", "bash", "text")
        if lang == "python":
            exec(compile(code, "atari.md", "exec"), namespace)
        elif lang == "bash":
            for line in code.splitlines():
                build_parser().parse_args(shlex.split(line)[1:])


def test_replay_memory_is_checked_before_allocating():
    from hyperx.agents.atari import check_replay_memory

    check_replay_memory(get_config("hyperagent", env="atari"), 1, 100_000)
    with pytest.raises(ValueError, match=r"1,000,000 replay slots \(.* per seed\) x 4,096 "
                       r"seeds: needs an estimated"):
        check_replay_memory(get_config("hyperdqn", env="atari"), 4096, 10**6)


SHARDED_SCRIPT = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax
import numpy as np
from hyperx.agents import get_config
from hyperx.agents.atari import GAMES_FILE, saved_games, train_atari
from hyperx.commands.atari import RunLog, write_games
config = get_config("dqn", env="atari", buffer_size=400, learning_starts=64, update_every=2)
kw = dict(steps=192, seeds=2, envs_per_seed=2, eval_every=96, eval_episodes=1,
          eval_max_steps=40)
runs = {name: train_atari(config, "Breakout", devices=devices, **kw)
        for name, devices in (("sharded", jax.devices()), ("single", None))}
out = {}
for name, r in runs.items():
    agent = r.carry.seeds.agent
    out[name + "_devices"] = np.array(len(agent.replay.data["obs"].sharding.device_set))
    out[name + "_obs"] = np.asarray(agent.replay.data["obs"])
    out[name + "_params"] = np.concatenate([np.asarray(x).ravel()
                                            for x in jax.tree.leaves(agent.params)])
    out[name + "_grad_steps"] = np.asarray(agent.grad_steps)
    out[name + "_evals"] = np.array([e["score"] for e in r.evaluations])
np.savez(sys.argv[1], devices=len(jax.devices()), **out)
"""


@pytest.mark.slow
def test_seeds_sharded_over_two_devices_train_as_on_one(tmp_path):
    """Two forced CPU devices, one pool of games per device (seeded to continue each other):
    the sharded run plays and stores the same frames, reaches the same parameters up to float
    reduction order and the same evaluations as the unsharded run, and its replay lives on
    both devices."""
    path = tmp_path / "out.npz"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", SHARDED_SCRIPT, str(path)], env=env, timeout=900,
                   check=True)
    r = np.load(path)
    assert int(r["devices"]) == 2
    assert int(r["sharded_devices"]) == 2 and int(r["single_devices"]) == 1
    np.testing.assert_array_equal(r["sharded_obs"], r["single_obs"])
    assert (r["sharded_grad_steps"] == r["single_grad_steps"]).all()
    assert int(r["single_grad_steps"][0]) > 0
    # Same frames means the same actions at every step; the parameters differ only by float
    # reduction order (one seed per device vs two vmapped), amplified by Adam on tiny
    # gradients: max |diff| 4e-3 measured, mean far below.
    diff = np.abs(r["sharded_params"] - r["single_params"])
    assert diff.max() < 2e-2 and diff.mean() < 1e-4, (diff.max(), diff.mean())
    np.testing.assert_array_equal(r["sharded_evals"], r["single_evals"])


def test_sharded_training_validates_the_device_count():
    config = get_config("dqn", env="atari", **SMALL)
    with pytest.raises(ValueError, match="seeds: expected a multiple of the 2 devices"):
        train_atari(config, "Breakout", steps=8, seeds=3, devices=[jax.devices()[0]] * 2)
    with pytest.raises(ValueError, match="devices: the host loop"):
        train_atari(config, "Breakout", steps=8, seeds=1, host_loop=True,
                    devices=jax.devices())


MULTI = dict(steps=128, seeds=4, envs_per_seed=2, eval_every=64, eval_episodes=1,
             eval_max_steps=40)


@pytest.mark.slow
def test_several_games_train_in_one_program_on_the_full_action_set():
    """Two games, two agents each, in one program: every row names its seed's game, the agents
    act on the ALE's 18 actions (Breakout's own set has 4) and the best re-evaluation runs on
    each seed's own game."""
    config = get_config("dqn", env="atari", update_every=2, **SMALL)
    result = train_atari(config, ["Breakout", "Pong"], best_eval_episodes=1, **MULTI)
    assert result.games == ("Breakout", "Breakout", "Pong", "Pong")
    rows = result.evaluations + result.best + result.episodes
    assert {r["game"] for r in rows} == {"Breakout", "Pong"}
    assert all(r["game"] == result.games[r["seed"]] for r in rows)
    assert len(result.evaluations) == 2 * 4 and all("rerun_score" in b for b in result.best)
    actions = np.asarray(result.carry.seeds.agent.replay.data["action"])
    assert actions.max() >= 4 and actions.max() < 18
    assert int(result.carry.seeds.agent.grad_steps[0]) > 0


@pytest.mark.slow
def test_a_seeds_run_does_not_depend_on_the_other_games():
    """Seeds 0-1 play Breakout beside Pong or beside Freeway: the same frames, parameters and
    evaluations bit for bit; and the host loop stores what the compiled loop stores."""
    config = get_config("dqn", env="atari", update_every=2, **SMALL)
    pong, freeway = (train_atari(config, ["Breakout", g], **MULTI) for g in ("Pong", "Freeway"))
    for run in (pong, freeway):
        assert leaves_equal(jax.tree.map(lambda x: x[:2], run.carry.seeds.agent),
                            jax.tree.map(lambda x: x[:2], pong.carry.seeds.agent))
    assert ([e for e in pong.evaluations if e["seed"] < 2]
            == [e for e in freeway.evaluations if e["seed"] < 2])
    frozen = get_config("dqn", env="atari", buffer_size=400, learning_starts=10**6)
    host, compiled = (train_atari(frozen, ["Breakout", "Pong"], steps=96, seeds=2,
                                  eval_episodes=0, host_loop=h) for h in (True, False))
    assert leaves_equal(host.carry.seeds.agent.replay, compiled.carry.seeds.agent.replay)


def test_several_games_need_equal_blocks_of_seeds():
    config = get_config("dqn", env="atari", **SMALL)
    with pytest.raises(ValueError, match="seeds: expected a multiple of the 2 games"):
        train_atari(config, ["Breakout", "Pong"], steps=8, seeds=3)
    with pytest.raises(ValueError, match="game: expected a game name or a sequence"):
        train_atari(config, [], steps=8)
    with pytest.raises(ValueError, match="devices: with several games"):
        train_atari(config, ["Breakout", "Pong", "Freeway"], steps=8, seeds=6,
                    devices=[jax.devices()[0]] * 2)
    with pytest.raises(ValueError, match="game: expected an Atari game name"):
        train_atari(config, ["Breakout", "Pongg"], steps=8, seeds=2)


@pytest.mark.slow
def test_evaluation_at_start_and_chunks_between_evaluations():
    """Step 0 is evaluated, chunks (and ``on_chunk``) come every ``chunk_steps``, evaluations
    every ``eval_every`` and at the end; ``on_chunk`` carries every evaluation so far."""
    config = get_config("hyperagent", env="atari", **SMALL)
    chunks = []
    result = train_atari(config, "Breakout", steps=64, seeds=1, eval_every=32, chunk_steps=16,
                         eval_episodes=1, eval_max_steps=20, eval_at_start=True,
                         on_chunk=chunks.append)
    assert [e["env_step"] for e in result.evaluations] == [0, 32, 64]
    assert [c.done for c in chunks] == [16, 32, 48, 64] and chunks[-1].total == 64
    assert [c.metrics["scores"] is None for c in chunks] == [True, False, True, False]
    assert chunks[-1].metrics["evaluations"] == result.evaluations


def test_chunks_must_divide_the_evaluation_period():
    config = get_config("hyperagent", env="atari", **SMALL)
    with pytest.raises(ValueError, match="chunk_steps: expected a divisor of eval_every"):
        train_atari(config, "Breakout", steps=64, eval_every=32, chunk_steps=24)


@pytest.mark.slow
def test_gpu_script_parity_mode_dry_run(tmp_path):
    """Every line of ``benchmarks/gpu_atari.sh parity`` on CPU with tiny sizes: the summary
    holds one mean per seed at steps 0, 32 and 64 for both games, and the baselines."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    env = dict(os.environ, DRY_RUN="1", OUT=str(tmp_path), PY=sys.executable)
    subprocess.run(["bash", "benchmarks/gpu_atari.sh", "parity"], cwd=root, env=env, check=True,
                   timeout=900)
    summary = json.loads((tmp_path / "gpu_atari_parity.json").read_text())
    for game in ("Alien", "Freeway"):
        entry = summary["games"][game]
        assert sorted(entry["hyperagent"]["evals"], key=int) == ["0", "32", "64"]
        assert all(len(v) == 2 for v in entry["hyperagent"]["evals"].values())
        assert "random" in entry["baselines"]
    assert "always_up" in summary["games"]["Freeway"]["baselines"]
    assert (tmp_path / "gpu_atari_parity.png").exists()


@pytest.mark.slow
def test_gpu_script_parity_mode_summarises_after_its_time_limit(tmp_path):
    """A parity run stopped by ``PARITY_LIMIT_S`` (a loan's end) still exits 0 with a summary
    built from what finished (nothing, after 1 s) and says that it stopped."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    env = dict(os.environ, DRY_RUN="1", OUT=str(tmp_path), PY=sys.executable, PARITY_LIMIT_S="1")
    out = subprocess.run(["bash", "benchmarks/gpu_atari.sh", "parity"], cwd=root, env=env,
                         check=True, timeout=300, capture_output=True, text=True)
    assert "stopped (exit 124)" in out.stderr
    summary = json.loads((tmp_path / "gpu_atari_parity.json").read_text())
    assert all(summary["games"][g]["hyperagent"]["evals"] == {} for g in ("Alien", "Freeway"))


def _computations(hlo: str) -> dict[str, list[str]]:
    """Optimised HLO text as {computation name: its lines}."""
    import re

    out, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"(?:ENTRY )?%([\w.\-]+) ", line)
        if head and not line.startswith(" "):
            name = "ENTRY" if line.startswith("ENTRY") else head.group(1)
            out[name] = []
        elif name is not None:
            out[name].append(line)
    return out


def _copies_outside_learning(hlo: str, shape: str, skip_learning: bool = True) -> int:
    """Copies of a carried buffer of ``shape`` (a ``copy`` of a ``get-tuple-element``, not a
    layout change inside a fused gradient) in what runs on a step that does not learn: every
    computation reachable from the entry without entering a conditional branch that computes
    a gradient (holds a dot, transitively; all of them with ``skip_learning=False``). The
    target sync's copy sits inside such a branch."""
    import functools
    import re

    comps = _computations(hlo)
    callee = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")
    copy = re.compile(rf"= {re.escape(shape)}\{{[^}}]*\}} copy\(%get-tuple-element")

    def branches(line: str) -> list[str]:
        found = re.search(r"branch_computations=\{([^}]*)\}", line)
        return [b.strip().lstrip("%") for b in found.group(1).split(",")] if found else []

    @functools.cache
    def learns(name: str) -> bool:
        return any(" dot(" in line or any(learns(c) for c in callee.findall(line) + branches(line))
                   for line in comps[name])

    seen, count = set(), 0
    todo = ["ENTRY"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in comps[name]:
            count += bool(copy.search(line))
            todo += callee.findall(line) + [b for b in branches(line)
                                            if not (skip_learning and learns(b))]
    return count


def test_a_step_that_does_not_learn_copies_no_parameters():
    """The compiled Atari chunk of a DQN (Nature CNN, 512 units, update every 4 steps) holds no
    copy of the 3136 x 512 weights nor of the replay outside the learning computation: with
    :func:`hyperx.loop.compiler_options` and the lockstep update the no-learn branch aliases
    its operands (before either, XLA:CPU copied the weights and both Adam moments there on
    every env step). The counter does find copies: the target sync's, inside the learning
    branch."""
    import jax.numpy as jnp

    import hyperx.loop as loop
    from hyperx.agents.atari import compiled_step, make_program
    from hyperx.envs.atari import OBS_SHAPE, AtariStep

    if jax.default_backend() != "cpu":
        pytest.skip("the copies are XLA:CPU's")
    config = get_config("dqn", env="atari", buffer_size=512, learning_starts=64)
    program = make_program(config, 4, 1, 1, 512, "repeat")

    def fake_env(c, actions):
        obs = jnp.zeros((1, *OBS_SHAPE), jnp.uint8) + c.astype(jnp.uint8)
        no = jnp.zeros((1,), bool)
        return c + 1, AtariStep(obs, jnp.zeros(1), jnp.zeros(1), no, no, no, no,
                                jnp.zeros(1, jnp.int32))

    def optimised_hlo() -> str:
        env, step = compiled_step(program, [(jnp.int32(0), fake_env)], jax.devices()[:1])
        scan = loop.scan_program(step, 8)
        carry = (env, program.init(jax.random.PRNGKey(0)[None],
                                   jnp.zeros((1, *OBS_SHAPE), jnp.uint8)))
        return scan.run_chunk.lower(carry, jnp.int32(0)).compile().as_text()

    hlo = optimised_hlo()
    assert _copies_outside_learning(hlo, "f32[1,3136,512]") == 0
    assert _copies_outside_learning(hlo, "u8[1,1,512,84,84]") == 0
    # the counter finds real copies: the target sync's, inside the learning branch
    assert _copies_outside_learning(hlo, "f32[1,3136,512]", skip_learning=False) >= 1
