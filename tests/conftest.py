"""Test-suite settings and shared fixtures.

hypothesis runs derandomised, so a run is reproducible in CI. The ``terminal`` fixture runs the
``hyperx`` console script the way a person does: in a pseudo-terminal (tqdm draws its bar
differently on a TTY), progress bar on, and returns its exit status and everything it printed.
The ``authors_hyperagent`` fixture builds the authors' HyperAgent environment once per session.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import settings

settings.register_profile("hyperx", derandomize=True, print_blob=True)
settings.load_profile("hyperx")


_CACHE_VAR = "JAX_COMPILATION_CACHE_DIR"


def _share_compiled_programs() -> str | None:
    """One JAX compilation cache per test run, shared by the xdist workers and the commands
    they start: a test that builds a program another test already built (the same agent or
    learner at the same shapes, from a fresh closure or in a fresh process) loads it instead of
    compiling it again. The main process makes a fresh folder (so a run starts cold, as in CI),
    its workers inherit it through the environment, and it is removed when the run ends; a
    command interrupted inside its first compilation runs without it (:func:`cold_compile_env`).
    Readers and writers hold JAX's file lock (``filelock``; without it, no cache).
    ``HYPERX_TEST_COMPILE_CACHE=0`` turns it off. Returns the folder this process made."""
    if os.environ.get("HYPERX_TEST_COMPILE_CACHE", "1") == "0":
        return None
    import importlib.util
    import tempfile

    import jax

    if importlib.util.find_spec("filelock") is None:  # no lock: a read could see a torn write
        return None

    made = None
    if "PYTEST_XDIST_WORKER" not in os.environ and _CACHE_VAR not in os.environ:
        made = tempfile.mkdtemp(prefix="hyperx-tests-jax-")
        os.environ[_CACHE_VAR] = made
    elif _CACHE_VAR not in os.environ:
        return None
    options = {"jax_persistent_cache_min_compile_time_secs": 0.2,
               # a size limit makes JAX lock the folder around every read and write
               "jax_compilation_cache_max_size": 8 * 2**30}
    for name, value in options.items():
        os.environ[name.upper()] = str(value)
        jax.config.update(name, value)
    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_VAR])
    return made


_CACHE_MADE = _share_compiled_programs()


def pytest_configure(config: pytest.Config) -> None:
    """The default suite (``-m 'not slow'``) asks XLA's CPU backend for unoptimised machine code
    (``--xla_backend_optimization_level=0``): its tests are short programs whose time is mostly
    LLVM's, and the same HLO is run (the graph optimisations stay on). The slow suite, whose
    learning runs are mostly execution, keeps XLA's default. Set before any test touches the
    backend; the commands that tests start inherit it. ``HYPERX_TEST_FAST_COMPILE=0`` keeps
    the default everywhere."""
    if (config.option.markexpr == "not slow"
            and os.environ.get("HYPERX_TEST_FAST_COMPILE", "1") != "0"):
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_backend_optimization_level" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0".strip()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _CACHE_MADE is not None:
        shutil.rmtree(_CACHE_MADE, ignore_errors=True)


def cold_compile_env() -> dict[str, str]:
    """``os.environ`` without the run's shared compilation cache: for a command that is to be
    interrupted inside its first, real compilation."""
    return {key: value for key, value in os.environ.items()
            if key != _CACHE_VAR}


@pytest.fixture
def cold_env() -> dict[str, str]:
    """:func:`cold_compile_env`."""
    return cold_compile_env()


class TerminalRun(NamedTuple):
    """A finished command: its exit status and the terminal's text (stdout and stderr as the
    person saw them, ``\\r`` redraws included)."""

    returncode: int
    text: str


def hyperx_command() -> list[str]:
    """The ``hyperx`` console script installed beside this interpreter, as a user runs it
    (``python -m hyperx`` where the script is not installed)."""
    script = Path(sys.executable).with_name("hyperx")
    return [str(script)] if script.exists() else [sys.executable, "-m", "hyperx"]


def run_in_terminal(args: Sequence[str], *, cwd: Path, timeout: float = 600,
                    interrupt_when: Callable[[str], bool] | None = None,
                    columns: int = 120) -> TerminalRun:
    """Run ``hyperx ARGS`` in ``cwd`` with a pseudo-terminal as stdin, stdout and stderr.

    ``interrupt_when(text)``: send SIGINT (Ctrl-C) once the printed text satisfies it. The
    command is killed, and the test fails, when it runs past ``timeout`` seconds.
    """
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {key: value for key, value in
           (cold_compile_env() if interrupt_when else os.environ).items()
           if not key.startswith(("PYTEST_", "COLUMNS", "LINES"))}
    env.update(TERM="xterm", JAX_PLATFORMS=env.get("JAX_PLATFORMS", "cpu"))
    proc = subprocess.Popen([*hyperx_command(), *args], stdin=child_fd, stdout=child_fd,
                            stderr=child_fd, cwd=cwd, env=env, start_new_session=True)
    os.close(child_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    interrupted = False
    try:
        while True:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                pytest.fail(f"hyperx {' '.join(args)} ran past {timeout} s; printed:\n"
                            + b"".join(chunks).decode(errors="replace")[-3000:])
            ready, _, _ = select.select([main_fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(main_fd, 65536)
                except OSError:  # EIO: every writer of the terminal has closed it
                    data = b""
                if not data:
                    break
                chunks.append(data)
            if (interrupt_when is not None and not interrupted
                    and interrupt_when(b"".join(chunks).decode(errors="replace"))):
                proc.send_signal(signal.SIGINT)
                interrupted = True
    finally:
        os.close(main_fd)
    returncode = proc.wait(timeout=60)
    return TerminalRun(returncode, b"".join(chunks).decode(errors="replace"))


@pytest.fixture
def terminal() -> Callable[..., TerminalRun]:
    """:func:`run_in_terminal`, for tests of a command as a person runs it."""
    return run_in_terminal


@pytest.fixture(scope="session")
def authors_hyperagent() -> tuple[str, str]:
    """``(python, checkout)`` of the authors' HyperAgent code in its own venv
    (``benchmarks/hyperagent_ref_env.py``: their code from the local mirror, torch from PyPI),
    built once; skips, saying why, only when it cannot be built here."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import hyperagent_ref_env

    if not Path(hyperagent_ref_env.MIRROR).is_dir():
        # A clone from GitHub and torch from PyPI (the CUDA build unless a CPU wheel is at hand:
        # several GB) are not attempted inside a test run.
        pytest.skip(f"the authors' code is not mirrored at {hyperagent_ref_env.MIRROR}")
    try:
        return hyperagent_ref_env.ensure()
    except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
        pytest.skip(f"the authors' HyperAgent environment cannot be built here: {e}")
