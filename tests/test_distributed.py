"""``jax.distributed`` on CPU: two processes on localhost run a bandit sweep and a DeepSea run
through the library's ``devices=`` entry points (tests/distributed_worker.py), each process
owning two CPU devices (four in all, gloo collectives); every process gets back the whole
result, equal bit for bit to one process on one device with the same seeds. Also: a DeepSea
run sharded over one process's two devices resumes from its checkpoint. docs/distributed.md
says how to launch the same program on a cluster.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from hyperx.agents import get_config
from hyperx.agents.deepsea import train_deepsea
from hyperx.loop import to_host

WORKER = Path(__file__).with_name("distributed_worker.py")
ROOT = WORKER.parents[1]
RESULTS = ("bandit_regret", "deepsea_returns", "deepsea_bad")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("XLA_FLAGS", None)
    return env


def _launch(out: Path, process_id: int, num_processes: int, port: int,
            local_devices: int) -> subprocess.Popen:
    command = [sys.executable, str(WORKER), "--process-id", str(process_id), "--num-processes",
               str(num_processes), "--port", str(port), "--local-devices", str(local_devices),
               "--out", str(out)]
    return subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(procs: list[subprocess.Popen], timeout: float) -> None:
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"process {i} exited with {p.returncode}:\n{log[-3000:]}"


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    port = _free_port()
    outs = [tmp_path / f"process{i}.json" for i in range(2)]
    ref_out = tmp_path / "one_process.json"
    _finish([_launch(out, i, 2, port, 2) for i, out in enumerate(outs)], timeout=300)
    _finish([_launch(ref_out, 0, 1, 0, 1)], timeout=300)
    reference = json.loads(ref_out.read_text())
    assert reference["global_devices"] == 1
    for i, out in enumerate(outs):
        got = json.loads(out.read_text())
        assert (got["process_index"], got["process_count"]) == (i, 2)
        assert (got["local_devices"], got["global_devices"]) == (2, 4)
        for name in RESULTS:
            np.testing.assert_array_equal(np.array(got[name]), np.array(reference[name]),
                                          err_msg=f"process {i}: {name}")
        assert "checkpoint_dir: not supported with devices of several processes" in (
            got["checkpoint_error"] or "")
    regret = np.array(reference["bandit_regret"])
    returns = np.array(reference["deepsea_returns"])
    assert regret.shape == (8, regret.shape[1]) and returns.shape == (8, 50)
    # seeds differ, so a gather in the wrong order would show
    assert len({tuple(r) for r in regret}) == 8 and len({tuple(r) for r in returns}) > 1


RESUME_SCRIPT = """
import jax
import numpy as np
jax.config.update("jax_num_cpu_devices", 2)
from hyperx.agents import get_config
from hyperx.agents.deepsea import train_deepsea
config, kw = get_config("hyperagent"), dict(num_seeds=4, seed=1, chunk_steps=30)
full = train_deepsea(config, 6, 20, **kw)
part = train_deepsea(config, 6, 20, checkpoint_dir="ckpt", max_chunks=1, devices=jax.devices(),
                     **kw)
rest = train_deepsea(config, 6, 20, checkpoint_dir="ckpt", devices=jax.devices(), **kw)
assert (part.steps_done, rest.steps_at_start, rest.steps_done) == (30, 30, 120)
assert len(rest.carry.seeds.returns.sharding.device_set) == 2
np.testing.assert_array_equal(rest.returns, full.returns)
np.testing.assert_array_equal(rest.bad, full.bad)
print("ok")
"""


@pytest.mark.slow
def test_deepsea_on_two_devices_resumes_from_a_checkpoint(tmp_path):
    out = subprocess.run([sys.executable, "-c", RESUME_SCRIPT], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_deepsea_seeds_must_fill_the_devices():
    device = jax.devices()[0]
    with pytest.raises(ValueError, match="num_seeds: expected a multiple of the 2 devices"):
        train_deepsea(get_config("hyperagent"), 6, 2, num_seeds=3, devices=[device, device])


def test_to_host_returns_numpy_leaves():
    tree = {"a": jax.numpy.arange(3), "b": (np.ones(2), None)}
    host = to_host(tree)
    assert isinstance(host["a"], np.ndarray) and host["b"][1] is None
    np.testing.assert_array_equal(host["a"], [0, 1, 2])
