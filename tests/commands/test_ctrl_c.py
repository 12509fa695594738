"""Ctrl-C during the first compilation of every command exits with status 130 and its one
line. ``hyperx llm`` interrupted in its warm-up's compilation used to print its line and then
die with SIGSEGV (exit 139) while the interpreter was finalized under XLA's compiling threads;
``hyperx.commands.console`` now ends the process at once after the line."""

import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

COMMANDS = {  # command line, and the line it prints just before its first compilation
    "deepsea": (["deepsea", "--size", "6", "--episodes", "40", "--seeds", "2"], "compiling"),
    "bandit": (["bandit", "--dim", "3", "--arms", "5", "--steps", "50", "--seeds", "4",
                "--agents", "ensemble_pp"], "compiling"),
    "games": (["games", "--actions", "5", "--steps", "50", "--seeds", "4"], "compiling"),
    "llm": (["llm", "--steps", "3"], "supervised warm-up"),
    "atari": (["atari", "--game", "Pong", "--agent", "dqn", "--steps", "256",
               "--eval-episodes", "0"], "compiling"),
    "demo": (["demo", "--steps", "20", "--seeds", "10", "--dim", "3"], "[1/3]"),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_ctrl_c_in_the_first_compile_exits_130_with_one_line(name, tmp_path, cold_env):
    argv, marker = COMMANDS[name]
    proc = subprocess.Popen([sys.executable, "-m", "hyperx", *argv, "--out",
                             str(tmp_path / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**cold_env, "PYTHONUNBUFFERED": "1"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            break
    assert proc.poll() is None, "".join(seen)
    time.sleep(0.3)  # inside the compilation that follows the line
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    lines = [line for line in ("".join(seen) + rest).splitlines() if line.strip()]
    assert proc.returncode == 130, "\n".join(lines[-20:])
    assert lines[-1].startswith("hyperx: interrupted: "), "\n".join(lines[-20:])
    assert "Traceback" not in rest, rest
