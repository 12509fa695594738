#!/usr/bin/env bash
# One GPU, under 8 minutes: the Atari throughput benchmark (compiled loop vs the CleanRL
# Python-loop design, agents-per-program scaling) and a short multi-seed Breakout run.
# Writes benchmarks/results/gpu_atari_throughput.json and benchmarks/results/gpu_breakout/.
# Usage (from the repository root, after `make test` built .venv): bash benchmarks/gpu_atari.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -c 'import jax; print(jax.devices())'
timeout 300 "$PY" benchmarks/atari_throughput.py --steps 2048 --agents-grid 1 4 16 \
  --out benchmarks/results/gpu_atari_throughput.json
timeout 180 .venv/bin/hyperx atari --game Breakout --agent hyperagent --steps 50000 --seeds 8 \
  --envs-per-seed 1 --eval-every 10000 --eval-episodes 5 --quiet --overwrite \
  --out benchmarks/results/gpu_breakout
