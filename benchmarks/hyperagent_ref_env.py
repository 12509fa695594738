"""The authors' HyperAgent environment: a checkout of szrlee/HyperAgent, a venv, the ROMs, and
the map from our initial weights to theirs.

``ensure(source, root)`` puts the authors' code at :data:`COMMIT` under ``root/code`` (from
``source``: a local clone or mirror's git directory, read with ``git archive`` so that only
the code paths are needed, or a URL, cloned bare first), builds ``root/venv`` with pip and
unpacks the Atari ROMs into ``root/roms``, each once. Their code is never copied into our
repository and runs unchanged; what changes at run time is in
``benchmarks/hyperagent_ref_peer.py`` (the compatibility layer for the ALE below and the
hooks of the runner), none of it in their files.

Versions against their ``requirements.txt`` (torch 1.8.1+cu101, gym 0.19.0, atari-py 0.2.9,
numpy 1.19.5, numba 0.53.1, opencv-python 4.5.4.58, h5py 3.1.0, tensorboard 2.9.0,
tqdm 4.61.2), none of which install on the Pythons here, and why:

* Python 3.11 (this machine's; their pins predate it).
* torch 2.13.0, the CPU build that lies in this machine's pip ``find-links`` folder
  (``torch-2.13.0+cpu``, 190 MB; the default PyPI build for Linux pulls the CUDA libraries,
  several GB). Their code uses ``nn.Conv2d``, ``nn.Linear``, ``F.linear``, ``einsum``, Adam and
  ``clip_grad_norm_``, unchanged in behaviour since 1.8.
* gym 0.23.1, the newest release with the old API throughout (``reset -> obs``, ``step`` ->
  4-tuple in ``Wrapper``, ``ObservationWrapper``, ``RewardWrapper``, ``TimeLimit``; 0.24-0.26
  move to the 5-tuple). gym 0.23 ships no Atari envs: they come from ale-py's plugin.
* ale-py 0.8.1, the oldest ale-py with a Python 3.11 wheel (0.7.x, made for gym 0.21-0.23,
  has none). It registers ``FreewayNoFrameskip-v4`` with gym 0.23 but its ``AtariEnv`` already
  speaks the new API (``reset -> (obs, info)``, 5-tuple steps): the one compatibility piece
  is an old-API subclass of it registered in its place at run time (``hyperagent_ref_peer.py``,
  ``legacy_atari()``), with gym 0.19's ``TimeLimit`` of ``frameskip * 100000`` steps for the
  ``NoFrameskip-v4`` ids and no ``OrderEnforcing`` (gym 0.19's ``make`` returned the
  ``TimeLimit`` itself, so that their ``env._max_episode_steps = 108000`` reaches it). The ALE
  itself (0.8.1 against atari-py 0.2.9's 0.6) keeps the v4 settings: no sticky actions,
  minimal action set, a 108,000-frame cap.
* The ROMs: ale-py 0.8.1 ships none and AutoROM downloads them from outside PyPI; ale-py
  0.9.0's wheel ships them. ``ensure`` downloads that wheel (``pip download``), unpacks its
  ``ale_py/roms/*.bin`` into ``root/roms`` and :func:`environ` points ale-py 0.8.1 at them
  with its own ``ALE_PY_ROM_DIR`` (Freeway's md5, 8e0ab801b1705a740b476b7f588c6d16, is the one
  in ale-py 0.8.1's list).
* numpy 1.26.4 (their code and gym 0.23 predate numpy 2), numba 0.60.0 (the newest for numpy
  1.26 on 3.11), opencv-python 4.10.0.84, h5py, tensorboard, tqdm and cloudpickle unpinned
  (what their imports need).

Weights: :func:`reference_state` maps our flax variables (``params`` and ``prior`` of the
``hyperagent`` Atari agent) to their ``HyperAgentNet`` ``state_dict`` (numpy arrays, keys as
theirs); see its docstring for every axis.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

COMMIT = "014902cd12348cd7960387ab9dfbac61671d3137"
URL = "https://github.com/szrlee/HyperAgent"
MIRROR = "/work/.mirror/szrlee+HyperAgent/repo"
ROOT = os.path.join(os.path.expanduser("~"), ".cache", "hyperx", "hyperagent_ref")
CODE_PATHS = ("hyperagent", "experiments", "setup.py", "requirements.txt", "README.md",
              "LICENSE")
PINNED = ("torch==2.13.0", "gym==0.23.1", "ale-py==0.8.1", "numpy==1.26.4", "numba==0.60.0",
          "opencv-python==4.10.0.84", "h5py", "tensorboard", "tqdm", "cloudpickle")
ROM_WHEEL = "ale-py==0.9.0"
PYTHON_VERSION = (3, 11)

# experiments/atari/run_HyperAgent.sh's arguments (besides --seed and --task).
RUN_HYPERAGENT_ARGS = ("--noise-dim=4", "--noise-per-sample=20", "--target-noise-per-sample=1",
                       "--action-sample-num=1", "--action-select-scheme=Greedy", "--epoch=100",
                       "--step-per-epoch=20000")


def default_source() -> str:
    """The local mirror when it is there, else :data:`URL`."""
    return MIRROR if os.path.isdir(MIRROR) else URL


def _python() -> str:
    """A Python 3.11 interpreter: ours when it is 3.11, else pyenv's."""
    if sys.version_info[:2] == PYTHON_VERSION:
        return sys.executable
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11.*/bin/python")))
    if not found:
        raise RuntimeError("no Python 3.11 found (ours is not 3.11 and ~/.pyenv has none)")
    return found[-1]


def environ(root: str = ROOT) -> dict[str, str]:
    """The environment of the authors' processes: ours without ``PYTHONPATH`` (nothing of
    hyperx importable there), with ale-py's ``ALE_PY_ROM_DIR`` at ``root/roms``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["ALE_PY_ROM_DIR"] = os.path.join(root, "roms")
    return env


def _checkout(source: str, root: str) -> str:
    code = os.path.join(root, "code")
    stamp = os.path.join(code, ".commit")
    if os.path.exists(stamp) and open(stamp).read().strip() == COMMIT:
        return code
    git_dir = source
    if not os.path.isdir(source):  # a URL: a bare clone first
        git_dir = os.path.join(root, "repo.git")
        if not os.path.isdir(git_dir):
            subprocess.run(["git", "clone", "-q", "--bare", source, git_dir], check=True)
    shutil.rmtree(code, ignore_errors=True)
    os.makedirs(code)
    archive = subprocess.run(["git", "--git-dir", git_dir, "archive", COMMIT, *CODE_PATHS],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", code], input=archive, check=True)
    with open(stamp, "w") as f:
        f.write(COMMIT + "\n")
    return code


def _roms(python: str, root: str) -> None:
    roms = os.path.join(root, "roms")
    if os.path.exists(os.path.join(roms, "freeway.bin")):
        return
    wheels = os.path.join(root, "wheels")
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", wheels, ROM_WHEEL], check=True, env=environ(root))
    (wheel,) = glob.glob(os.path.join(wheels, "ale_py-0.9.0-*.whl"))
    os.makedirs(roms, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("ale_py/roms/") and name.endswith(".bin"):
                with open(os.path.join(roms, os.path.basename(name)), "wb") as f:
                    f.write(z.read(name))


def ensure(source: str | None = None, root: str = ROOT) -> tuple[str, str]:
    """(python, checkout): the authors' venv interpreter and their code at :data:`COMMIT`,
    made under ``root`` when missing (``source``: :func:`default_source` when ``None``)."""
    source = default_source() if source is None else source
    os.makedirs(root, exist_ok=True)
    code = _checkout(source, root)
    venv = os.path.join(root, "venv")
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, ".installed")):
        subprocess.run([_python(), "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PINNED], check=True,
                       env=environ(root))
        open(os.path.join(venv, ".installed"), "w").close()
    _roms(python, root)
    return python, code


def versions(python: str, root: str = ROOT) -> dict[str, str]:
    """The installed versions of the authors' venv's packages that matter here."""
    names = ["torch", "gym", "ale-py", "numpy", "numba", "opencv-python"]
    code = ("import json; from importlib import metadata; "
            f"print(json.dumps({{n: metadata.version(n) for n in {names!r}}}))")
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True,
                         env=environ(root))
    return json.loads(out.stdout)


def _torso(t: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
    """One Nature-CNN torso: flax ``Conv_i`` / ``Dense_0`` -> ``{prefix}.0.{0,2,4}`` (convs) and
    ``{prefix}.2`` (the linear layer after MinMax, which sits at ``{prefix}.1``)."""
    out = {}
    for i, layer in enumerate((0, 2, 4)):
        kernel = np.asarray(t[f"Conv_{i}"]["kernel"], np.float32)  # (k, k, C, F): HWIO
        if kernel.ndim != 4 or kernel.shape[0] != kernel.shape[1]:
            raise ValueError(f"{prefix} Conv_{i}: expected a (k, k, C, F) kernel, got "
                             f"{kernel.shape}")
        out[f"{prefix}.0.{layer}.weight"] = np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))
        out[f"{prefix}.0.{layer}.bias"] = np.asarray(t[f"Conv_{i}"]["bias"], np.float32)
    dense = np.asarray(t["Dense_0"]["kernel"], np.float32)  # (H W C, hidden), NHWC rows
    channels = out[f"{prefix}.0.4.weight"].shape[0]
    side = int(round((dense.shape[0] / channels) ** 0.5))
    if side * side * channels != dense.shape[0]:
        raise ValueError(f"{prefix} Dense_0: {dense.shape[0]} rows is not a square of "
                         f"{channels}-channel pixels")
    # Ours flattens (H, W, C), torch (C, H, W): row (h W + w) C + c -> column c H W + h W + w.
    out[f"{prefix}.2.weight"] = np.ascontiguousarray(
        dense.reshape(side, side, channels, -1).transpose(3, 2, 0, 1).reshape(dense.shape[1], -1))
    out[f"{prefix}.2.bias"] = np.asarray(t["Dense_0"]["bias"], np.float32)
    return out


def _hyper(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Our ``A`` (O, P, M) and ``b`` (O, P) -> their ``HyperLayer`` weight (P O, M) and bias
    (P O,): their layer's output of length P O is read as (P, O) (``base_forward``'s
    ``reshape(..., in_dim, out_dim)``), so entry ``p O + o`` is ours ``[o, p]``."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if a.ndim != 3 or b.shape != a.shape[:2]:
        raise ValueError(f"expected A (O, P, M) and b (O, P), got {a.shape} and {b.shape}")
    o, p, m = a.shape
    return (np.ascontiguousarray(a.transpose(1, 0, 2).reshape(p * o, m)),
            np.ascontiguousarray(b.T.reshape(p * o)))


def reference_state(params: Mapping[str, Any], prior: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Our ``hyperagent`` Atari variables -> their ``HyperAgentNet.state_dict()`` (numpy).

    Ours (``hyperx.heads.HypermodelHead`` on a ``NatureCNN``, ``prior_torso="independent"``,
    ``bias_init="xavier"``): ``params = {torso, hyper: {A, b}}``,
    ``prior = {prior_torso, hyper: {A0, b0}}``. Theirs (``--model-type conv --normalize MinMax
    --base-prior 1``): ``feature.basedmodel`` / ``feature.priormodel`` and ``Q.hyper_weight`` /
    ``Q.prior_weight``.

    * conv kernels: ours (k, k, C, F), HWIO on the channels-first stack transposed to NHWC;
      torch ``Conv2d`` (F, C, k, k) on NCHW: ``transpose(3, 2, 0, 1)``; biases as they are.
    * the 3136 -> 256 layer: ours ``x @ K`` with K (3136, 256) on the NHWC flatten (row
      ``(h 7 + w) 64 + c``), torch ``x @ W.T`` with W (256, 3136) on the NCHW flatten (column
      ``c 49 + h 7 + w``). The per-row MinMax before it is a min and max over the row, so the
      order of the row does not change it.
    * the hyper layers: :func:`_hyper` (``A``, ``b`` -> ``Q.hyper_weight``; ``A0``, ``b0`` ->
      ``Q.prior_weight``).
    * nothing else is a parameter: both read the index as ``z / |z|`` (their
      ``--noise-norm 1``, our ``normalise_index``) and scale posterior and prior by 0.1 each
      (their ``--posterior-scale`` / ``--prior-scale``, our config's), and both feed raw 0-255
      frames (their ``float32`` cast, our ``input_scale=1``).
    """
    for name, tree, keys in (("params", params, ("torso", "hyper")),
                             ("prior", prior, ("prior_torso", "hyper"))):
        missing = [k for k in keys if k not in tree]
        if missing:
            raise ValueError(f"{name}: missing {missing} (the hyperagent Atari agent's "
                             f"variables with prior_torso='independent' are expected)")
    if "b0" not in prior["hyper"]:
        raise ValueError("prior['hyper'] has no b0: expected bias_init='xavier'")
    state = {**_torso(params["torso"], "feature.basedmodel"),
             **_torso(prior["prior_torso"], "feature.priormodel")}
    state["Q.hyper_weight.weight"], state["Q.hyper_weight.bias"] = _hyper(
        params["hyper"]["A"], params["hyper"]["b"])
    state["Q.prior_weight.weight"], state["Q.prior_weight.bias"] = _hyper(
        prior["hyper"]["A0"], prior["hyper"]["b0"])
    return state


def save_state(path: str, params: Mapping[str, Any], prior: Mapping[str, Any]) -> None:
    """:func:`reference_state` written to ``path`` as an ``.npz`` (read by the peer)."""
    np.savez(path, **reference_state(params, prior))
