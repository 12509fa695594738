"""The stages of ``benchmarks/gpu_suite.sh`` (one GPU loan, under 9 minutes) and their summary.

Each stage is a subcommand that writes its own JSON after every row it finishes, so a stage
stopped by its ``timeout`` still leaves what it measured; ``collect`` gathers the stage files,
exit codes, command lines and log tails into ``benchmarks/results/gpu_suite.json`` with the
device, the versions and the projections. The stages reuse the benchmark scripts' own
functions (:func:`atari_throughput.compiled`, :func:`deepsea_throughput.scan_throughput`,
:func:`llm_step_time.measure`, and the same :func:`hyperx.bandits.runner.run_bandit` calls as
``bandit_throughput.py``); the learning check is ``atari_parity.py`` itself.

* ``atari-agents``: summed agent steps/s of one program of N agents per game (vmapped seeds)
  for N in ``--per-program``; with ``--games-per-program K ...``, the first K games of
  ``--game`` in one program (N agents each, the ALE's full action set,
  :class:`hyperx.envs.atari.AtariGames`); with one gradient step per agent step
  (``update_every=1``, HyperAgent's own ratio, set for DQN too) and a small replay
  (``--buffer-size`` transitions per agent, so 128 agents fit on one GPU);
* ``bandit``: seed-rounds/s of the vmapped regret sweep (exact TS and linear Ensemble++ M = 16,
  Russo and Van Roy's game, d = 50, K = 1000) at ``--seeds`` seeds, beside this CPU's figure
  from ``benchmarks/results/bandit_throughput.json`` (same game, learners and rounds; 200
  seeds) or, with ``--cpu-baseline``, measured here at the stage's own sizes;
* ``deepsea``: env steps/s of the compiled DeepSea scan at ``--seeds`` seeds;
* ``llm``: the LLM trainer's step time at the benchmark model's size and a model ``--widen``
  times wider (d_model x 8), beside this CPU's ``llm_step_time.json``;
* ``collect``: the summary and the projections (:func:`projections`);
* ``wheels``: the wheel folder the bare GPU machine needs (:func:`build_wheels`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
STAGES = ("atari_agents", "atari_games_2", "atari_games_4", "atari_games_program", "learning",
          "bandit", "deepsea", "llm")

STUDIES = {
    "hyperagent_8hard": {
        "games": 8, "seeds": 5, "agent_steps": 2_000_000,
        "authors_setup": (
            "szrlee/HyperAgent (experiments/atari/run_HyperAgent.sh at commit 014902c, "
            "PyTorch): 8 hard games x 5 seeds (2025-2029) x 2M agent steps (100 epochs of "
            "20,000 steps), one (game, seed) per process, one environment per agent, one "
            "gradient step (batch 32, 20 indices) per agent step after 2000 random steps, "
            "replay of 100k; results in atari_results/HyperAgent_8hard.csv"),
    },
    "atari26_1p5M": {
        "games": 26, "seeds": 3, "agent_steps": 1_500_000,
        "authors_setup": (
            "the HyperAgent paper's 26-game Atari benchmark: 26 games x 1.5M agent "
            "interactions per run (human-normalised IQM 1.0 reported there), here 3 seeds; "
            "the same per-step settings as the 8-hard study (one update per agent step, "
            "replay of 100k)"),
    },
}
FORMULA = ("GPU-hours = games x seeds x agent_steps / R / 3600, R = summed agent steps/s of "
           "the configuration named (one GPU), assumed to hold for the whole run")


# ----------------------------------------------------------------------------- small helpers

def write_json(path: str | Path, payload: dict) -> None:
    """``payload`` to ``path`` atomically (its folder made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


def device_info() -> dict:
    import jax

    devices = jax.devices()
    return {"device": str(devices[0]), "device_kind": devices[0].device_kind,
            "device_count": len(devices), "platform": jax.default_backend()}


def versions() -> dict:
    """The versions that decide the numbers (None: not importable)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "flax", "optax", "envpool", "numpy", "hyperx-rl"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        import envpool  # the checkout's tree may run without an installed dist-info

        out["envpool"] = out["envpool"] or envpool.__version__
    except Exception:  # noqa: BLE001 - recorded as missing
        pass
    return out


# ----------------------------------------------------------------------------- stages

def stage_atari_agents(args: argparse.Namespace) -> None:
    import atari_throughput as at

    from hyperx.agents import get_config

    if any(not 1 <= k <= len(args.game) for k in args.games_per_program or ()):
        raise SystemExit(f"--games-per-program: expected counts in [1, {len(args.game)}] (the "
                         f"games of --game), got {args.games_per_program}")
    sets = [args.game[:k] for k in args.games_per_program or (len(args.game),)]
    result = {"game": args.game[0] if len(args.game) == 1 else args.game,
              "steps_per_agent": args.steps, "update_every": 1,
              "buffer_size_per_agent": args.buffer_size,
              "learning_starts": args.learning_starts,
              "note": ("replay of --buffer-size transitions per agent (not the configs' 100k) "
                       "so that 128 agents fit on one GPU; update_every=1 for both agents; "
                       "each agent's own torso width; agent steps/s summed over the program's "
                       "agents, after compiling (atari_throughput.compiled)"),
              **device_info(), "rows": []}
    for games in sets:
        for n in args.per_program:
            for agent in args.agents:
                width = get_config(agent, env="atari").torso_widths[0]
                row = at.compiled(agent, games, args.steps, n * len(games), 1,
                                  learning_starts=args.learning_starts, width=width,
                                  update_every=1, buffer_size=args.buffer_size)
                end = time.time()
                run_s = row["env_steps"] / row["env_steps_per_s"]
                row.update(games=games, agents_per_game=n, agents_per_program=n * len(games),
                           width=width, run_start=end - run_s, run_end=end,
                           agent_steps_per_s=row["env_steps_per_s"])
                result["rows"].append(row)
                print(f"{', '.join(games)} {agent}: {n * len(games)} agents per program, "
                      f"{row['agent_steps_per_s']:.1f} agent steps/s", flush=True)
                write_json(args.out, result)
    write_json(args.out, result)


def stage_bandit(args: argparse.Namespace) -> None:
    from bandit_throughput import SIZES, M

    from hyperx.bandits.linear import ensemble_pp, exact_ts
    from hyperx.bandits.runner import run_bandit
    from hyperx.envs.bandits import russo

    dim, arms = args.dim, args.arms
    size = next((k for k, v in SIZES.items() if v == (dim, arms)), f"d{dim}_k{arms}")
    cpu = cpu_bandit_figures(size, args)
    result = {"size": size, "dim": dim, "arms": arms, "seeds": args.seeds, "steps": args.steps,
              **device_info(), "cpu_baseline": cpu, "rows": []}
    env = russo(dim=dim, num_arms=arms)
    for name, learner in (("exact_ts", exact_ts()), (f"ensemble_pp_M{M}", ensemble_pp(M))):
        res = run_bandit(env, learner, horizon=args.steps, num_seeds=args.seeds,
                         checkpoints=[args.steps])
        row = {"learner": name, "seed_rounds_per_s": res.run_steps_per_s,
               "compile_time_s": res.compile_time_s, "run_time_s": res.wall_time_s,
               "group_size": res.group_size}
        base = cpu["figures"].get(name)
        if base:
            row["cpu_seed_rounds_per_s"] = base
            row["over_cpu"] = res.run_steps_per_s / base
        result["rows"].append(row)
        print(f"bandit {size} {name}: {row['seed_rounds_per_s']:.3g} seed-rounds/s", flush=True)
        write_json(args.out, result)


def cpu_bandit_figures(size: str, args: argparse.Namespace) -> dict:
    """This CPU's seed-rounds/s per learner: from ``--cpu-file`` when it holds ``size`` at the
    same rounds, else (``--cpu-baseline``) measured here at the stage's sizes."""
    path = Path(args.cpu_file)
    if path.exists() and not args.cpu_baseline:
        saved = json.loads(path.read_text())
        rows = [r for r in saved.get("rows", []) if r.get("size") == size
                and r.get("steps") == args.steps]
        if rows:
            return {"source": str(path.relative_to(HERE.parent) if path.is_absolute()
                                  and HERE.parent in path.parents else path),
                    "same_config": True, "device": saved.get("device"),
                    "seeds": rows[0]["seeds"], "steps": rows[0]["steps"],
                    "note": ("the same game, learners and rounds; seeds differ (the CPU run's "
                             "seeds against this stage's), rates are per seed-round"),
                    "figures": {r["learner"]: r["jax_seed_steps_per_s"] for r in rows}}
    if not args.cpu_baseline:
        return {"source": None, "same_config": False, "figures": {},
                "note": f"no CPU figure for {size} at {args.steps} rounds in {path}"}
    import jax
    from bandit_throughput import M

    from hyperx.bandits.linear import ensemble_pp, exact_ts
    from hyperx.bandits.runner import run_bandit
    from hyperx.envs.bandits import russo

    cpu = jax.devices("cpu")[0]
    env = russo(dim=args.dim, num_arms=args.arms)
    figures = {}
    with jax.default_device(cpu):
        for name, learner in (("exact_ts", exact_ts()), (f"ensemble_pp_M{M}", ensemble_pp(M))):
            figures[name] = run_bandit(env, learner, horizon=args.steps, num_seeds=args.seeds,
                                       checkpoints=[args.steps]).run_steps_per_s
    return {"source": "measured in this stage on the host CPU", "same_config": False,
            "device": str(cpu), "seeds": args.seeds, "steps": args.steps,
            "note": (f"a different config from bandit_throughput.json's ({size} at "
                     f"{args.steps} rounds and {args.seeds} seeds: the dry run's tiny sizes)"),
            "figures": figures}


def stage_deepsea(args: argparse.Namespace) -> None:
    from deepsea_throughput import scan_throughput

    cpu = {}
    saved = RESULTS / "deepsea_throughput.json"
    if saved.exists():
        data = json.loads(saved.read_text())
        if data.get("size") == args.size and data.get("agent") == args.agent:
            cpu = {"source": "benchmarks/results/deepsea_throughput.json",
                   "device": data.get("device"), "steps_per_seed": data.get("steps_per_seed"),
                   "env_steps_per_s_by_seeds": {str(r["seeds"]): r["env_steps_per_s"]
                                                for r in data["rows"]
                                                if r.get("driver") == "scan"}}
    result = {"agent": args.agent, "size": args.size, "steps_per_seed": args.steps,
              **device_info(), "cpu_baseline": cpu, "rows": []}
    for seeds in args.seeds:
        row = scan_throughput(args.agent, args.size, args.steps, seeds)
        if cpu:
            best = max(cpu["env_steps_per_s_by_seeds"].values())
            row.update(cpu_best_env_steps_per_s=best, over_cpu_best=row["env_steps_per_s"] / best)
        result["rows"].append(row)
        print(f"deepsea {args.size}: {seeds} seeds {row['env_steps_per_s']:.1f} env steps/s",
              flush=True)
        write_json(args.out, result)


def stage_llm(args: argparse.Namespace) -> None:
    from llm_step_time import SIZES, measure

    base = dict(SIZES["benchmark_model"])
    if args.tiny:  # the dry run: a model and batch small enough for seconds on a CPU
        base.update(d_model=8, num_layers=1, num_heads=2, prompts=2, group_size=2)
    wide = dict(base, d_model=base["d_model"] * args.widen)
    cpu = {}
    saved = RESULTS / "llm_step_time.json"
    if saved.exists():
        data = json.loads(saved.read_text())
        cpu = {"source": "benchmarks/results/llm_step_time.json", "machine": data.get("machine"),
               "median_step_s": {k: v["median_step_s"] for k, v in data["sizes"].items()}}
    result = {**device_info(), "cpu_baseline": cpu, "widen": args.widen, "sizes": {}}
    for name, size in (("benchmark_model", base), (f"{args.widen}x_wider", wide)):
        result["sizes"][name] = measure(size, args.steps)
        print(f"llm {name}: {result['sizes'][name]['median_step_s'] * 1e3:.1f} ms per step",
              flush=True)
        write_json(args.out, result)


# ----------------------------------------------------------------------------- summary

def projections(rates: dict[str, float]) -> dict:
    """GPU-hours of each study in :data:`STUDIES` at each summed agent-steps/s rate in
    ``rates`` (``{label: agent steps/s}``), with the formula and the authors' setup."""
    out = {"formula": FORMULA, "rates_agent_steps_per_s": dict(rates), "studies": {}}
    for name, study in STUDIES.items():
        total = study["games"] * study["seeds"] * study["agent_steps"]
        out["studies"][name] = {
            **study, "total_agent_steps": total,
            "gpu_hours": {label: total / rate / 3600 for label, rate in rates.items()
                          if rate and rate > 0}}
    return out


def _stage_record(folder: Path, name: str) -> dict:
    rec: dict = {"status": "not run"}
    cmd = folder / f"{name}.cmd"
    if cmd.exists():
        rec["command"] = cmd.read_text().strip()
    budget = folder / f"{name}.budget"
    if budget.exists():
        rec["budget_s"] = int(budget.read_text())
    rc_file = folder / f"{name}.rc"
    if rc_file.exists():
        rc = int(rc_file.read_text().split()[0])
        rec["exit_code"] = rc
        rec["status"] = "ok" if rc == 0 else ("timeout" if rc in (124, 137) else "failed")
        wall = folder / f"{name}.wall"
        if wall.exists():
            rec["wall_s"] = float(wall.read_text())
    log = folder / f"{name}.log"
    if rec.get("status") not in ("ok", "not run") and log.exists():
        lines = log.read_text(errors="replace").strip().splitlines()
        rec["error"] = "\n".join(lines[-15:])
    data = folder / f"{name}.json"
    if data.exists():
        rec["result"] = json.loads(data.read_text())
    return rec


def _games_summary(folder: Path, k: int) -> dict | None:
    """The side-by-side stage of ``k`` processes: the sum of their rates, and the total agent
    steps over the span from the first process's timed start to the last one's end (lower:
    it counts the time the processes did not overlap)."""
    rows = []
    for path in sorted(folder.glob(f"atari_games_{k}_[0-9]*.json")):
        rows += [dict(r, game=json.loads(path.read_text())["game"])
                 for r in json.loads(path.read_text())["rows"]]
    if not rows:
        return None
    span = max(r["run_end"] for r in rows) - min(r["run_start"] for r in rows)
    return {"processes": k, "games": [r["game"] for r in rows],
            "agents_per_program": rows[0]["agents_per_program"], "agent": rows[0]["agent"],
            "complete": len(rows) == k,
            "sum_of_rates_agent_steps_per_s": sum(r["agent_steps_per_s"] for r in rows),
            "over_span_agent_steps_per_s": sum(r["env_steps"] for r in rows) / span,
            "rows": rows}


def collect(args: argparse.Namespace) -> dict:
    folder = Path(args.dir)
    stages = {name: _stage_record(folder, name) for name in STAGES}
    for k in (2, 4):
        summary = _games_summary(folder, k)
        if summary is not None:
            stages[f"atari_games_{k}"]["result"] = summary
    learning = stages["learning"].get("result")
    if learning:
        alien = learning["games"]["Alien"]
        evals = alien["hyperagent"]["evals"]
        means = {k: sum(v) / len(v) for k, v in evals.items()}
        ref = (alien.get("reference_hyperagent") or {}).get("20000")
        stages["learning"]["check"] = {
            "mean_by_step": means, "seeds_by_step": {k: len(v) for k, v in evals.items()},
            "reference_mean_min_max_at_20000": ref,
            "mean_at_20000_inside_reference_range": (
                ref[1] <= means["20000"] <= ref[2] if ref and "20000" in means else None),
            "checks": alien["checks"]}
    setup = folder / "setup.json"
    rates = {}
    agents = stages["atari_agents"].get("result", {}).get("rows", [])
    best = {}
    for r in agents:
        if r["agent_steps_per_s"] > best.get(r["agent"], {}).get("agent_steps_per_s", 0):
            best[r["agent"]] = r
    for agent, r in best.items():
        rates[f"{agent}_best_agents_per_program_{r['agents_per_program']}"] = \
            r["agent_steps_per_s"]
    for k in (2, 4):
        res = stages[f"atari_games_{k}"].get("result")
        if res and "over_span_agent_steps_per_s" in res:
            rates[f"{res['agent']}_{k}_games_side_by_side_"
                  f"{res['agents_per_program']}_agents_each"] = res["over_span_agent_steps_per_s"]
    for r in stages["atari_games_program"].get("result", {}).get("rows", []):
        rates[f"{r['agent']}_{len(r['games'])}_games_in_one_program_"
              f"{r['agents_per_game']}_agents_each"] = r["agent_steps_per_s"]
    proj = projections(rates)
    proj["note"] = (
        "the studies train HyperAgent with 5 (8-hard) or 3 (26-game) seeds per game: the "
        "layouts such a study can use are several one-game programs side by side and several "
        "games in one program (the ALE's full action set; a one-game run has the game's own "
        "set), the best agents-per-program rate a bound for both. The stages' replays are small "
        "(buffer_size_per_agent); the studies' 100k per agent take 0.71 GB each "
        "(docs/atari.md), so 40 agents at once need about 28 GB of GPU memory")
    payload = {
        "suite": "benchmarks/gpu_suite.sh", "dry_run": args.dry_run, "command": args.command,
        "started": args.started, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **device_info(), "versions": versions(), "commit": _commit(),
        "setup": json.loads(setup.read_text()) if setup.exists() else None,
        "budget_s": sum(s.get("budget_s", 0) for s in stages.values()),
        "stages": stages, "projections": proj}
    write_json(args.out, payload)
    print(json.dumps({k: v["status"] for k, v in stages.items()}))
    print(json.dumps({k: v["gpu_hours"] for k, v in proj["studies"].items()}, indent=1))
    print(f"wrote {args.out}")
    return payload


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                              check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# ----------------------------------------------------------------------------- wheels

WHEELS = ["envpool==1.2.5", "envpool-assets==0.3.0", "gymnasium==1.4.0",
          "Farama-Notifications==0.0.6", "dm-env==1.6", "dm-tree==0.1.10", "optree==0.20.0",
          "tensorboardX==2.6.5", "ale-py==0.12.1"]
"""What the suite imports that the bare GPU machine's image lacks (versions from
requirements.lock; ale-py for its ROM list, :func:`hyperx.envs.atari.game_names`). The image
already holds jax, jaxlib (CUDA 13), flax, optax, chex, orbax-checkpoint, numpy, matplotlib,
tqdm, absl-py, protobuf, cloudpickle and typing-extensions."""
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]
KEEP = {"envpool": ("envpool/atari/",), "envpool_assets": ("envpool_assets/atari/",)}
"""Per slimmed wheel, the only folders whose compiled modules / data are kept (envpool's 50 MB
wheel is 8 MB with Atari alone; the other families' assets are 60 MB): envpool's ``entry.py``,
which imports every family's registration and with it its ``*.so``, is cut to the kept ones
(``envpool.make`` then knows the Atari tasks only); the Atari ROMs stay in
``envpool_assets/atari/roms``."""


def slim_wheel(path: Path, keep: tuple[str, ...]) -> None:
    """Rewrite the wheel at ``path`` without the ``*.so`` files and asset folders of the
    environment families outside ``keep``, its ``entry.py`` importing the kept families only
    and its RECORD rewritten to match."""
    top = path.name.split("-")[0]
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        names, edited = [], {}
        for info in src.infolist():
            name = info.filename
            family = name.startswith(top + "/") and name.count("/") >= 2
            dropped = family and not name.startswith(keep) and (
                name.endswith(".so") or top == "envpool_assets")
            if dropped or name.endswith("/RECORD"):
                continue
            data = src.read(name)
            if name == f"{top}/entry.py":  # registers every family, importing its *.so
                data = "".join(
                    line for line in data.decode().splitlines(keepends=True)
                    if not line.startswith(f"import {top}.") or any(
                        line.startswith("import " + k.rstrip("/").replace("/", "."))
                        for k in keep)).encode()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                edited[name] = f"{name},sha256={digest.decode()},{len(data)}"
            dst.writestr(info, data)
            names.append(name)
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        kept = set(names)
        lines = [edited.get(line.split(",")[0], line)
                 for line in src.read(record).decode().splitlines()
                 if line.split(",")[0] in kept]
        dst.writestr(record, "\n".join(lines + [f"{record},,"]) + "\n")
    os.replace(tmp, path)


def build_wheels(args: argparse.Namespace) -> None:
    """Download :data:`WHEELS` for CPython 3.12 manylinux x86-64 into ``--dir`` and slim
    envpool and its assets to Atari (the folder travels with the tree: 64 MiB in all)."""
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(folder)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run(cmd + WHEELS, check=True)
    for wheel in folder.glob("*.whl"):
        top = wheel.name.split("-")[0]
        if top in KEEP:
            slim_wheel(wheel, KEEP[top])
    total = sum(w.stat().st_size for w in folder.glob("*.whl"))
    for w in sorted(folder.glob("*.whl")):
        print(f"{w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    print(f"{total / 2**20:7.2f} MiB in {folder}")


# ----------------------------------------------------------------------------- command line

def main() -> None:
    sys.path.insert(0, str(HERE))  # the benchmark scripts whose functions the stages reuse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="stage", required=True)
    a = sub.add_parser("atari-agents")
    a.add_argument("--game", nargs="+", default=["Breakout"])
    a.add_argument("--games-per-program", type=int, nargs="+",
                   help="one program per count K, holding the first K games of --game")
    a.add_argument("--agents", nargs="+", default=["hyperagent", "dqn"])
    a.add_argument("--per-program", type=int, nargs="+", default=[8, 32, 128],
                   help="agents per game in a program")
    a.add_argument("--steps", type=int, default=1000, help="agent steps per agent")
    a.add_argument("--buffer-size", type=int, default=10_000)
    a.add_argument("--learning-starts", type=int, default=64)
    b = sub.add_parser("bandit")
    b.add_argument("--seeds", type=int, default=10_000)
    b.add_argument("--steps", type=int, default=500)
    b.add_argument("--dim", type=int, default=50)
    b.add_argument("--arms", type=int, default=1000)
    b.add_argument("--cpu-file", default=str(RESULTS / "bandit_throughput.json"))
    b.add_argument("--cpu-baseline", action="store_true",
                   help="measure this machine's CPU at the stage's sizes (a different config "
                        "from the saved CPU figure)")
    d = sub.add_parser("deepsea")
    d.add_argument("--agent", default="hyperagent")
    d.add_argument("--size", type=int, default=10)
    d.add_argument("--steps", type=int, default=3000)
    d.add_argument("--seeds", type=int, nargs="+", default=[1024])
    m = sub.add_parser("llm")
    m.add_argument("--steps", type=int, default=11, help="steps per size (the first compiles)")
    m.add_argument("--widen", type=int, default=8)
    m.add_argument("--tiny", action="store_true")
    for s in (a, b, d, m):
        s.add_argument("--out", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--dir", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--command", default="bash benchmarks/gpu_suite.sh")
    c.add_argument("--started", default=None)
    c.add_argument("--dry-run", action="store_true")
    w = sub.add_parser("wheels")
    w.add_argument("--dir", default=str(HERE / "wheels"))
    args = p.parse_args()
    {"atari-agents": stage_atari_agents, "bandit": stage_bandit, "deepsea": stage_deepsea,
     "llm": stage_llm, "collect": collect, "wheels": build_wheels}[args.stage](args)


if __name__ == "__main__":
    main()
