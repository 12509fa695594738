"""Host-side helpers of the compiled loops: atomic writes, Ctrl-C held over a write, and the
environment (versions, devices, commit) a run records and prints.

The cores (:mod:`hyperx.loop`, :mod:`hyperx.checkpoint`) and the trainers use these; the
commands (:mod:`hyperx.commands`) build their run directories on them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import platform
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hyperx._validation import plural


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


def first_difference(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """``"key: A (saved) vs B (now)"`` for the first key whose values differ, or ``None``."""
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            return f"{key}: {saved.get(key)!r} (saved) vs {current.get(key)!r} (now)"
    return None


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


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Write ``header`` and ``rows`` to the CSV ``path`` atomically (:func:`write_atomic`)."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    write_atomic(path, text.getvalue())


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


def installed_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (read without importing it), or
    ``None`` when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """What a run ran on, for ``run.json`` and ``summary.json``: the versions of hyperx, Python
    and :data:`VERSIONED`, jax's backend, device kind and counts, and the commit."""
    import jax

    import hyperx

    devices = jax.devices()
    return {"hyperx": hyperx.__version__, "python": platform.python_version(),
            **{name: installed_version(name) for name in VERSIONED},
            "backend": jax.default_backend(), "device_kind": devices[0].device_kind,
            "device_count": len(devices), "process_count": jax.process_count(),
            "commit": _commit()}


def device_line(label: str, env: dict[str, Any] | None = None) -> str:
    """``atari: jax 0.10.2 on cpu (1 device: cpu)``: the line a command prints when its work
    starts (with its progress), naming the backend and device it runs on."""
    env = environment() if env is None else env
    return (f"{label}: jax {env['jax']} on {env['backend']} "
            f"({plural(env['device_count'], 'device')}: {env['device_kind']})")
