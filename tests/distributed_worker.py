"""One process of a ``jax.distributed`` run of a bandit sweep and a DeepSea run on CPU.

Launched by tests/test_distributed.py, once per process::

    python tests/distributed_worker.py --process-id I --num-processes N --port P \\
        --local-devices D --out FILE

With ``--num-processes 1`` it is the one-process reference (no ``jax.distributed``). Every
process runs the same program on all processes' devices (``jax.devices()``) through the
library's entry points, :func:`hyperx.bandits.runner.run_bandit` and
:func:`hyperx.agents.deepsea.train_deepsea`, and writes what it got back to ``FILE`` (JSON).
Importing hyperx starts no JAX backend, so the imports may come before
``jax.distributed.initialize()``; the first computation must come after it.
"""

from __future__ import annotations

import argparse
import json

import jax

from hyperx.agents import get_config
from hyperx.agents.deepsea import train_deepsea
from hyperx.bandits.baselines import epsilon_greedy
from hyperx.bandits.runner import run_bandit
from hyperx.envs.bandits import make_bandit_env

BANDIT = {"horizon": 50, "num_seeds": 8, "seed": 7}
DEEPSEA = {"size": 6, "num_episodes": 50, "num_seeds": 8, "seed": 3}


def main() -> None:
    """Parse the arguments, join the cluster, run both jobs and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--local-devices", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", args.local_devices)
    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}",
                                   num_processes=args.num_processes,
                                   process_id=args.process_id, initialization_timeout=120)

    devices = jax.devices()
    bandit = run_bandit(make_bandit_env("russo", dim=3, num_arms=5), epsilon_greedy(0.1),
                        devices=devices, **BANDIT)
    deep = train_deepsea(get_config("hyperagent"), devices=devices, **DEEPSEA)
    checkpoint_error = None
    if args.num_processes > 1:
        try:
            train_deepsea(get_config("hyperagent"), devices=devices,
                          checkpoint_dir=args.out + ".ckpt", **DEEPSEA)
        except ValueError as err:
            checkpoint_error = str(err)
    result = {
        "process_index": jax.process_index(), "process_count": jax.process_count(),
        "global_devices": len(devices), "local_devices": len(jax.local_devices()),
        "bandit_regret": bandit.regret.tolist(),
        "deepsea_returns": deep.returns.tolist(), "deepsea_bad": deep.bad.tolist(),
        "checkpoint_error": checkpoint_error,
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    if args.num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
