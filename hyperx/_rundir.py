"""Output directories of the ``hyperx`` commands: checked before any work, resumable.

A run's directory holds ``run.json`` (the command and its settings, and ``complete`` once the
run has finished) beside its outputs. :func:`prepare_out` is called before anything is
computed:

- ``--out`` must be a directory path that can be created and written;
- an empty or new directory starts a fresh run; so does the directory of an unfinished earlier
  run with the same settings (its outputs are replaced) unless ``--resume`` continues it;
- the same command on its finished run does nothing and says the run is complete, with or
  without ``--resume`` (``--overwrite`` runs it again);
- a directory holding a different run, or files that are not a hyperx run, is refused unless
  ``--overwrite`` (which removes the files this command writes, and only those) is given;
  ``--resume`` into a different run names the first differing option and both values.

Outputs are written with :func:`write_atomic` (a temporary file renamed into place), so an
interrupted write never leaves a truncated file under its final name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._argparse import check_out_path, check_out_usable, fail
from hyperx._validation import plural

MANIFEST = "run.json"


class _HeldSignals:
    """The SIGINT handler while a :func:`sigint_held` block runs: records, does not raise."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum: int, frame: Any) -> None:
        self.received.append(signum)


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block is done, then raise ``KeyboardInterrupt``.

    Nested blocks hold for the outermost one: a save inside a chunk's hook and save does not
    raise in the middle of the outer block.
    """
    if (threading.current_thread() is not threading.main_thread()
            or isinstance(signal.getsignal(signal.SIGINT), _HeldSignals)):
        yield
        return
    held = _HeldSignals()
    previous = signal.signal(signal.SIGINT, held)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held.received:
        raise KeyboardInterrupt


def interval95(values) -> dict[str, Any]:
    """Mean, standard deviation and normal 95% interval (mean +- 1.96 sd / sqrt(n)) of the
    per-seed ``values`` that a run's summary.json reports (``sd``, ``ci95``: None for n < 2)."""
    values = np.asarray(values, np.float64)
    mean = float(np.mean(values))
    if values.size < 2:
        return {"mean": mean, "sd": None, "ci95": None}
    sd = float(np.std(values, ddof=1))
    half = 1.96 * sd / math.sqrt(values.size)
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half]}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-inf) replaced by ``None``, so that
    ``json.dumps(..., allow_nan=False)`` writes standard JSON (``-Infinity`` is not JSON)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return None
    return value


def first_difference(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """``"key: A (saved) vs B (now)"`` for the first key whose values differ, or ``None``."""
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            return f"{key}: {saved.get(key)!r} (saved) vs {current.get(key)!r} (now)"
    return None


def _option(difference: str) -> str:
    key, _, rest = difference.partition(":")
    return f"--{key.replace('_', '-')}{':' if rest else ''}{rest}"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The run description in ``out``, or ``None`` when there is none."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("command"), str):
        return None  # damaged: not a run description (e.g. [] or without its command)
    return manifest


VERSIONED = ("jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint")
"""The distributions whose versions a run records beside hyperx's (:func:`environment`)."""


def _commit() -> str | None:
    """The git commit of the hyperx checkout this process imported (``+dirty`` when tracked
    files differ from it), or ``None`` for an installed copy or without git."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def environment() -> dict[str, Any]:
    """What a run ran on, for ``run.json`` and ``summary.json``: the versions of hyperx, Python
    and :data:`VERSIONED`, jax's backend, device kind and counts, and the commit."""
    from importlib import metadata

    import jax

    import hyperx

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    devices = jax.devices()
    return {"hyperx": hyperx.__version__, "python": platform.python_version(),
            **{name: version(name) for name in VERSIONED},
            "backend": jax.default_backend(), "device_kind": devices[0].device_kind,
            "device_count": len(devices), "process_count": jax.process_count(),
            "commit": _commit()}


def device_line(label: str, env: dict[str, Any] | None = None) -> str:
    """``atari: jax 0.10.2 on cpu (1 device: cpu)``: the line a command prints when its work
    starts (with its progress), naming the backend and device it runs on."""
    env = environment() if env is None else env
    return (f"{label}: jax {env['jax']} on {env['backend']} "
            f"({plural(env['device_count'], 'device')}: {env['device_kind']})")


def write_manifest(out: Path, command: str, settings: dict[str, Any], *,
                   complete: bool = False) -> None:
    """Record ``command`` and ``settings`` (and whether the run finished) in ``out``, with
    the :func:`environment` of the process that writes it."""
    write_atomic(out / MANIFEST, json.dumps(
        {"command": command, "settings": settings, "complete": complete,
         "environment": environment()}, indent=2) + "\n")


def write_summary_json(out: Path, summary: dict[str, Any], *, allow_nan: bool = True) -> None:
    """Write ``out/summary.json`` atomically, with the :func:`environment` that produced it
    under ``"environment"``."""
    text = json.dumps({**summary, "environment": environment()}, indent=2, allow_nan=allow_nan)
    write_atomic(Path(out) / "summary.json", text + "\n")


def remove_outputs(out: Path, names: Iterable[str]) -> None:
    """Delete the files and folders ``names`` a command writes in ``out``, and its run.json."""
    for name in [*names, MANIFEST]:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def check_out_rules(out: str, command: str, settings: dict[str, Any], *, resume: bool,
                    overwrite: bool) -> dict[str, Any] | None:
    """The run-directory rules of :func:`prepare_out` without touching ``out`` (what
    ``--dry-run`` checks): returns the manifest a ``--resume`` continues, or that of the same
    run already complete (with or without ``--resume``; ``--overwrite`` runs it again), else
    ``None``; exits with a one-line error when the directory cannot be used."""
    check_out_usable(out)
    path = Path(out)
    manifest = read_manifest(path) if path.is_dir() else None
    same = (manifest is not None and manifest.get("command") == command
            and manifest.get("settings") == settings)
    if resume:
        if manifest is None:
            why = "damaged" if (path / MANIFEST).exists() else "missing"
            fail(f"--resume: {out!r} holds no hyperx {command} run ({MANIFEST} {why})")
        if manifest.get("command") != command:
            fail(f"--resume: {out!r} holds a hyperx {manifest['command']} run, not a "
                 f"{command} run")
        if not same:
            fail(f"--resume: {out!r} holds a different run, "
                 f"{_option(first_difference(manifest.get('settings') or {}, settings) or '')}; "
                 "rerun with the saved options or choose another --out")
        return manifest
    if same and manifest.get("complete") and not overwrite:
        return manifest  # the finished run itself: the command says so and does nothing
    if path.is_dir() and any(path.iterdir()) and not same and not overwrite:
        if manifest is not None:
            diff = first_difference(manifest.get("settings") or {}, settings)
            why = (f"a hyperx {manifest.get('command')} run"
                   if manifest.get("command") != command or not diff
                   else f"a different run, {_option(diff)}")
            fail(f"--out: {out!r} holds {why}; pass --overwrite to replace it or choose "
                 "another --out")
        fail(f"--out: {out!r} is not empty and holds no hyperx run; pass --overwrite to write "
             "there anyway or choose another --out")
    return None


def prepare_out(out: str, command: str, settings: dict[str, Any], *, resume: bool,
                overwrite: bool, outputs: Iterable[str]) -> tuple[Path, dict[str, Any] | None]:
    """Check and claim ``--out`` before any work (module docstring).

    Args:
      out: the ``--out`` argument.
      command: the subcommand (``"bandit"``, ``"deepsea"``).
      settings: the options that define the run (JSON values); a resumed run must match them.
      resume, overwrite: the ``--resume`` / ``--overwrite`` flags.
      outputs: the file and folder names the command writes (removed on a fresh start).

    Returns the directory and, when resuming, the manifest found there (else ``None``). Exits
    with a one-line ``hyperx: error: ...`` (status 2) when the directory cannot be used
    (:func:`check_out_rules`).
    """
    outputs = list(outputs)
    manifest = check_out_rules(out, command, settings, resume=resume, overwrite=overwrite)
    check_out_path(out)
    path = Path(out)
    if manifest is not None:
        return path, manifest
    remove_outputs(path, outputs)
    write_manifest(path, command, settings)
    return path, None


def saved_run(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """For ``--eval-only``: the options of the ``command`` run in ``args.out`` (its run.json's
    settings over ``args``); exits with a one-line error when ``--out`` holds no such run or the
    run saved no agent (made without ``--checkpoint``)."""
    out = Path(args.out)
    manifest = read_manifest(out) if out.is_dir() else None
    if manifest is None or manifest.get("command") != command:
        fail(f"--eval-only: {args.out!r} holds no hyperx {command} run (its run.json is missing "
             "or names another command); pass the --out of a run made with --checkpoint")
    run = argparse.Namespace(**{**vars(args), **(manifest.get("settings") or {})})
    if not run.checkpoint:
        fail(f"--eval-only: the run in {args.out!r} was made without --checkpoint, so no agent "
             "was saved; train with --checkpoint to evaluate it later")
    return run


def read_summary(path: Path) -> dict:
    """A run's ``summary.json`` as a dict; ``ValueError`` naming the file otherwise."""
    try:
        meta = json.loads(path.read_text())
    except ValueError:
        raise ValueError(f"{path}: not JSON") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return meta
