"""benchmarks/gpu_suite.{sh,py}: the projection arithmetic, the summary of the stage files, and
(slow) the whole suite's dry run on CPU."""

import argparse
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import gpu_suite  # noqa: E402


def test_projections_by_hand():
    """8-hard: 8 x 5 x 2M = 80M agent steps, at 1000/s 80,000 s = 22.2 h; 26 games: 26 x 3 x
    1.5M = 117M, at 1000/s 32.5 h and at 4000/s 8.125 h."""
    out = gpu_suite.projections({"a": 1000.0, "b": 4000.0, "none": 0.0})
    hard, a26 = out["studies"]["hyperagent_8hard"], out["studies"]["atari26_1p5M"]
    assert hard["total_agent_steps"] == 80_000_000
    assert a26["total_agent_steps"] == 117_000_000
    assert hard["gpu_hours"]["a"] == pytest.approx(80_000 / 3600)
    assert hard["gpu_hours"]["b"] == pytest.approx(5.555555, rel=1e-6)
    assert a26["gpu_hours"] == pytest.approx({"a": 32.5, "b": 8.125})
    assert "none" not in hard["gpu_hours"]
    assert "GPU-hours = games x seeds x agent_steps / R / 3600" in out["formula"]
    assert "szrlee/HyperAgent" in hard["authors_setup"]


def _row(agent, n, rate, start=0.0):
    steps = 100 * n
    return {"agent": agent, "agents_per_program": n, "agent_steps_per_s": rate,
            "env_steps": steps, "env_steps_per_s": rate, "run_start": start,
            "run_end": start + steps / rate}


def test_collect_picks_the_best_rates_and_records_failures(tmp_path):
    """The best agents-per-program row per agent and the side-by-side rate over the span of
    the processes feed the projections; a timed-out stage keeps its partial rows and its
    log's end; a stage never started is 'not run'."""
    d = tmp_path / "gpu_suite"
    d.mkdir()
    rows = [_row("hyperagent", 8, 800.0), _row("hyperagent", 32, 2000.0),
            _row("hyperagent", 128, 1500.0), _row("dqn", 8, 900.0)]
    (d / "atari_agents.json").write_text(json.dumps({"rows": rows}))
    (d / "atari_agents.rc").write_text("0\n")
    (d / "atari_agents.cmd").write_text("python benchmarks/gpu_suite.py atari-agents\n")
    (d / "atari_agents.budget").write_text("125\n")
    # two processes of 800 steps each: one timed over [0, 1] s, the other over [1, 2] s
    for i, game in enumerate(("Breakout", "Alien")):
        (d / f"atari_games_2_{i}.json").write_text(json.dumps(
            {"game": game, "rows": [_row("hyperagent", 8, 800.0, start=float(i))]}))
    (d / "atari_games_2.rc").write_text("0\n")
    (d / "atari_games_program.json").write_text(json.dumps({"rows": [
        dict(_row("hyperagent", 16, 1200.0), games=["Breakout", "Alien"], agents_per_game=8)]}))
    (d / "bandit.rc").write_text("124\n")
    (d / "bandit.log").write_text("compiling\nkilled\n")
    (d / "bandit.json").write_text(json.dumps({"rows": [{"learner": "exact_ts"}]}))
    args = argparse.Namespace(dir=str(d), out=str(tmp_path / "s.json"), command="cmd",
                              started=None, dry_run=True)
    out = gpu_suite.collect(args)
    assert json.loads((tmp_path / "s.json").read_text())["command"] == "cmd"
    stages = out["stages"]
    assert stages["atari_agents"]["status"] == "ok"
    assert stages["atari_agents"]["budget_s"] == 125
    assert stages["bandit"]["status"] == "timeout"
    assert stages["bandit"]["error"].endswith("killed")
    assert stages["bandit"]["result"]["rows"] == [{"learner": "exact_ts"}]
    assert stages["llm"]["status"] == "not run"
    games = stages["atari_games_2"]["result"]
    assert games["sum_of_rates_agent_steps_per_s"] == pytest.approx(1600.0)
    assert games["over_span_agent_steps_per_s"] == pytest.approx(800.0)  # 1600 steps in 2 s
    rates = out["projections"]["rates_agent_steps_per_s"]
    assert rates == {"hyperagent_best_agents_per_program_32": 2000.0,
                     "dqn_best_agents_per_program_8": 900.0,
                     "hyperagent_2_games_side_by_side_8_agents_each": 800.0,
                     "hyperagent_2_games_in_one_program_8_agents_each": 1200.0}
    hours = out["projections"]["studies"]["hyperagent_8hard"]["gpu_hours"]
    assert hours["hyperagent_best_agents_per_program_32"] == pytest.approx(80e6 / 2000 / 3600)


def test_slimmed_wheel_keeps_only_the_named_family(tmp_path):
    """``slim_wheel`` drops the other families' compiled modules (and, for the assets wheel,
    their data), keeps Python files, cuts ``entry.py`` to the kept families' registrations
    and rewrites RECORD to the files it kept."""
    import zipfile

    path = tmp_path / "envpool-1.0-cp312-cp312-linux_x86_64.whl"
    files = ["envpool/__init__.py", "envpool/atari/atari_envpool.so",
             "envpool/mujoco/mujoco_gym_envpool.so", "envpool/mujoco/registration.py",
             "envpool.libs/libEGL.so.1"]
    record = "envpool-1.0.dist-info/RECORD"
    entry = "import envpool.atari.registration  # x\nimport envpool.mujoco.registration\n"
    files.append("envpool/entry.py")
    with zipfile.ZipFile(path, "w") as z:
        for f in files:
            z.writestr(f, entry if f.endswith("entry.py") else "x")
        z.writestr(record, "\n".join(f"{f},sha256=x,1" for f in files) + f"\n{record},,\n")
    gpu_suite.slim_wheel(path, ("envpool/atari/",))
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        kept = {line.split(",")[0] for line in z.read(record).decode().splitlines()}
        entry_after = z.read("envpool/entry.py").decode()
    assert "envpool/mujoco/mujoco_gym_envpool.so" not in names
    assert {"envpool/atari/atari_envpool.so", "envpool/mujoco/registration.py",
            "envpool.libs/libEGL.so.1", "envpool/__init__.py"} <= names
    assert kept == names
    assert entry_after == "import envpool.atari.registration  # x\n"


@pytest.mark.slow
def test_dry_run_records_every_stage_and_the_projections(tmp_path):
    """Every line of ``DRY_RUN=1 bash benchmarks/gpu_suite.sh`` on CPU with tiny sizes: every
    stage ran to the end with numbers, and the projections are computed from them."""
    env = dict(os.environ, DRY_RUN="1", OUT=str(tmp_path), PY=sys.executable)
    subprocess.run(["bash", "benchmarks/gpu_suite.sh"], cwd=ROOT, env=env, check=True,
                   timeout=900)
    out = json.loads((tmp_path / "gpu_suite.json").read_text())
    assert out["dry_run"] is True and out["command"] == "DRY_RUN=1 bash benchmarks/gpu_suite.sh"
    assert out["versions"]["jax"] and out["versions"]["envpool"] and out["device"]
    stages = out["stages"]
    assert set(stages) == set(gpu_suite.STAGES)
    for name, stage in stages.items():
        assert stage["status"] == "ok", (name, stage.get("error"))
        assert stage["command"] and stage["wall_s"] > 0
    agents = stages["atari_agents"]["result"]["rows"]
    assert {(r["agent"], r["agents_per_program"]) for r in agents} == {
        (a, 2) for a in ("hyperagent", "dqn")}
    assert all(r["agent_steps_per_s"] > 0 for r in agents)
    for k in (2, 4):
        games = stages[f"atari_games_{k}"]["result"]
        assert games["complete"] and games["games"] == ["Breakout", "Pong"] * (k // 2)
        assert games["over_span_agent_steps_per_s"] > 0
    program = stages["atari_games_program"]["result"]["rows"]
    assert [(r["games"], r["agents_per_program"]) for r in program] == [
        (["Breakout", "Pong"], 2), (["Breakout", "Pong", "Breakout", "Pong"], 4)]
    assert all(r["agent_steps_per_s"] > 0 for r in program)
    evals = stages["learning"]["result"]["games"]["Alien"]["hyperagent"]["evals"]
    assert list(evals) == ["64"] and len(evals["64"]) == 2
    assert stages["learning"]["check"]["seeds_by_step"] == {"64": 2}
    assert len(stages["learning"]["check"]["reference_mean_min_max_at_20000"]) == 3
    bandit = stages["bandit"]["result"]
    assert all(r["seed_rounds_per_s"] > 0 and r["over_cpu"] > 0 for r in bandit["rows"])
    assert bandit["cpu_baseline"]["same_config"] is False
    assert stages["deepsea"]["result"]["rows"][0]["seeds"] == 8
    llm = stages["llm"]["result"]["sizes"]
    assert llm["8x_wider"]["d_model"] == 8 * llm["benchmark_model"]["d_model"]
    assert all(s["median_step_s"] > 0 for s in llm.values())
    studies = out["projections"]["studies"]
    # a rate each: the best agents per program of the 2 agents, 2 and 4 games side by side,
    # 2 and 4 games in one program
    assert all(len(s["gpu_hours"]) == 6 and all(h > 0 for h in s["gpu_hours"].values())
               for s in studies.values())
