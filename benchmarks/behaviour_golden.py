"""Record the outputs of every command on fixed seeds, and check a later commit against them.

A structural change that must leave behaviour unchanged (issue 23: one loop driver, one replay
core, renames) is checked here: ``--record`` runs ``hyperx demo``, a DeepSea run, a bandit sweep,
a short Atari run and a short LLM run, each into its own folder, and stores one SHA-256 per
output file of a canonical form (CSV and JSON parsed, columns and keys that measure time or
name the machine dropped and listed, plots, TensorBoard files and checkpoints skipped);
``--check`` runs the same commands on the current checkout and names every file whose canonical
form differs, with the first differing row or key:

    PYTHONPATH=. .venv/bin/python benchmarks/behaviour_golden.py --record   # before
    PYTHONPATH=. .venv/bin/python benchmarks/behaviour_golden.py --check    # after

The record is ``results/behaviour_golden.json`` (with the commit it was taken at). Results are
compared on the same machine type: XLA on another CPU may round differently.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "behaviour_golden.json"
COMMANDS = {
    "demo": ["demo", "--steps", "20", "--seeds", "10", "--dim", "3", "--index-dim", "2"],
    "deepsea": ["deepsea", "--size", "8", "--agent", "hyperagent", "--seeds", "4",
                "--episodes", "60", "--quiet"],
    "bandit": ["bandit", "--dim", "3", "--arms", "8", "--steps", "60", "--seeds", "8",
               "--agents", "ensemble_pp,linucb,exact_ts", "--quiet"],
    "atari": ["atari", "--game", "Pong", "--agent", "hyperagent", "--steps", "256",
              "--envs-per-seed", "4", "--eval-every", "128", "--eval-episodes", "1",
              "--learning-starts", "64", "--buffer-size", "512", "--quiet"],
    "llm": ["llm", "--task", "addition", "--difficulty", "1", "--steps", "6", "--prompts", "2",
            "--group-size", "4", "--warmup-steps", "5", "--d-model", "32", "--layers", "1",
            "--heads", "2", "--correction", "seq_tis", "--advantage", "otb", "--lag", "1",
            "--quiet"],
}
"""Each command's arguments (``--out`` is added)."""
VOLATILE = re.compile(r"(^|_)(time|times|seconds|secs|wall|elapsed|date|started|finished|"
                      r"created|host|hostname|commit|version|jax|machine|device|platform|environment|"
                      r"out|path|command|argv)($|_)|per_s$|_s$|_ms$")
"""Column and key names that measure time or name the machine, the checkout or the folder."""
SKIPPED = {".png", ".pdf", ".svg"}
SKIPPED_DIRS = {"tb", "checkpoints", "checkpoint", "parts_tmp"}


def canonical(path: Path) -> tuple[str, list[str]]:
    """The file's canonical text and the names dropped from it."""
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(path.read_text())))
        if not rows:
            return "", []
        keep = [i for i, name in enumerate(rows[0]) if not VOLATILE.search(name)]
        dropped = [name for i, name in enumerate(rows[0]) if i not in keep]
        return "\n".join(",".join(row[i] for i in keep if i < len(row)) for row in rows), dropped
    if path.suffix == ".json":
        dropped: set[str] = set()

        def clean(x):
            if isinstance(x, dict):
                out = {}
                for k, v in x.items():
                    if VOLATILE.search(str(k)):
                        dropped.add(str(k))
                    else:
                        out[k] = clean(v)
                return out
            if isinstance(x, list):
                return [clean(v) for v in x]
            return x

        return json.dumps(clean(json.loads(path.read_text())), sort_keys=True, indent=0), sorted(
            dropped)
    return path.read_bytes().hex(), []


def outputs(folder: Path) -> dict[str, dict]:
    """``{relative path: {"sha256", "dropped", "text"}}`` of every compared file in ``folder``."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if (not path.is_file() or path.suffix in SKIPPED or path.name.endswith(".tmp")
                or SKIPPED_DIRS & set(rel.parts[:-1])):
            continue
        text, dropped = canonical(path)
        out[str(rel)] = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "dropped": dropped,
                         "text": text}
    return out


def run(name: str, folder: Path) -> dict[str, dict]:
    """Run command ``name`` into ``folder`` (a fresh process) and read its outputs."""
    argv = [sys.executable, "-m", "hyperx", *COMMANDS[name], "--out", str(folder)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return outputs(folder)


def first_difference(old: str, new: str) -> str:
    for i, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False)):
        if a != b:
            return f"line {i + 1}: was {a[:160]!r}, now {b[:160]!r}"
    return f"lengths differ ({len(old.splitlines())} -> {len(new.splitlines())} lines)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", action="store_true")
    mode.add_argument("--check", action="store_true")
    p.add_argument("--commands", nargs="+", choices=tuple(COMMANDS), default=list(COMMANDS))
    p.add_argument("--file", type=Path, default=RECORD)
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.commands:
            got[name] = run(name, Path(tmp) / name)
            print(f"{name}: {len(got[name])} files", flush=True)
    if args.record:
        args.file.write_text(json.dumps({"commit": commit, "commands": COMMANDS,
                                         "outputs": got}, indent=1))
        print(f"wrote {args.file} at {commit}")
        return
    want = json.loads(args.file.read_text())
    differ = 0
    for name in args.commands:
        old, new = want["outputs"].get(name, {}), got[name]
        for rel in sorted(set(old) | set(new)):
            if rel not in new or rel not in old:
                differ += 1
                print(f"{name}/{rel}: {'missing now' if rel not in new else 'new file'}")
            elif old[rel]["sha256"] != new[rel]["sha256"]:
                differ += 1
                where = first_difference(old[rel]["text"], new[rel]["text"])
                print(f"{name}/{rel}: differs, {where}")
    print(f"{differ} file(s) differ from the record taken at {want['commit']}")
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
