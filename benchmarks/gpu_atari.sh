#!/usr/bin/env bash
# One GPU loan, two modes (from the repository root, after `make test` built .venv):
#
#   bash benchmarks/gpu_atari.sh            # throughput (under 8 minutes): the compiled loop
#       against the CleanRL Python-loop design and agents per program, then a short 8-seed
#       Breakout run; writes benchmarks/results/gpu_atari_throughput.json, gpu_breakout/.
#   bash benchmarks/gpu_atari.sh parity     # parity (about 7 minutes on one H200):
#       benchmarks/atari_parity.py on Alien and Freeway side by side, 8 hyperagent seeds
#       vmapped in one program per game, PARITY_STEPS agent steps (default 40k), evaluated at
#       0 and every 20k on 10 games, stopped after PARITY_LIMIT_S seconds (default 540) and
#       summarised from the chunks it finished (no checkpoints: a loan cannot resume). On an
#       H200 each game ran 20k steps of its 8 seeds in 150-165 s after a 228-256 s first chunk
#       (compiling, the step-0 evaluation, the baselines), so PARITY_STEPS=100000 needs about
#       14 minutes (benchmarks/results/gpu_atari_parity.json); writes
#       benchmarks/results/gpu_atari_parity.json|png and gpu_atari_parity/.
#
# DRY_RUN=1 runs every line of a mode with tiny sizes on any device (the slow tests do, so
# the script has run before anyone spends GPU time on it); OUT overrides the output folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODE=${1:-throughput}
OUT=${OUT:-benchmarks/results}
"$PY" -c 'import jax; print(jax.devices())'
case "$MODE" in
  throughput)
    if [ "${DRY_RUN:-0}" = 1 ]; then
      STEPS=64; GRID="1 2"; RUN="--steps 64 --seeds 2 --eval-every 32 --eval-episodes 1"
    else
      STEPS=2048; GRID="1 4 16"; RUN="--steps 50000 --seeds 8 --eval-every 10000 --eval-episodes 5"
    fi
    timeout 300 "$PY" benchmarks/atari_throughput.py --steps "$STEPS" --agents-grid $GRID \
      --out "$OUT/gpu_atari_throughput.json"
    # shellcheck disable=SC2086
    timeout 180 "$(dirname "$PY")/hyperx" atari --game Breakout --agent hyperagent $RUN \
      --envs-per-seed 1 --quiet --overwrite --out "$OUT/gpu_breakout"
    ;;
  parity)
    if [ "${DRY_RUN:-0}" = 1 ]; then
      SIZES="--steps 64 --eval-every 32 --chunk-steps 32 --seeds 2 --seeds-per-program 2
             --eval-episodes 1 --eval-max-steps 30 --random-episodes 2 --learning-starts 16
             --no-checkpoints"
    else
      SIZES="--steps ${PARITY_STEPS:-40000} --eval-every 20000 --chunk-steps 20000 --seeds 8
             --seeds-per-program 8 --no-checkpoints"
    fi
    # One process per game, side by side on the one GPU (the steps are latency bound, so two
    # programs overlap), each stopped after PARITY_LIMIT_S seconds with its per-chunk progress
    # files kept; the summary and plot are then built from every finished chunk, so a short
    # loan still records what it ran.
    export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
    DIR="$OUT/gpu_atari_parity"
    mkdir -p "$DIR"
    pids=()
    for game in Alien Freeway; do
      # shellcheck disable=SC2086
      timeout "${PARITY_LIMIT_S:-540}" "$PY" benchmarks/atari_parity.py --games "$game" \
        --agents hyperagent $SIZES --out-dir "$DIR" --summary "$DIR/$game.json" \
        > "$DIR/$game.log" 2>&1 &
      pids+=("$!")
    done
    for i in 0 1; do
      rc=0
      wait "${pids[$i]}" || rc=$?
      [ "$rc" = 0 ] || echo "parity run ${i} stopped (exit $rc); summarising its finished chunks" >&2
    done
    tail -n 15 "$DIR/Alien.log" "$DIR/Freeway.log"
    # shellcheck disable=SC2086
    "$PY" benchmarks/atari_parity.py --games Alien Freeway --agents hyperagent $SIZES \
      --out-dir "$DIR" --summary "$OUT/gpu_atari_parity.json" --summarise-only
    ;;
  *)
    echo "usage: bash benchmarks/gpu_atari.sh [throughput|parity]" >&2
    exit 2
    ;;
esac
