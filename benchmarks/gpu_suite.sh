#!/usr/bin/env bash
# The GPU suite: one command, under 9 minutes on one H200, from the repository root
# of a fresh copy of the tree on a bare machine (Python 3.12 with jax/jaxlib + CUDA preinstalled,
# no network):
#
#   bash benchmarks/gpu_suite.sh           # the GPU run: writes benchmarks/results/gpu_suite.json
#   DRY_RUN=1 bash benchmarks/gpu_suite.sh # every line with tiny sizes, any device (slow tests)
#   bash benchmarks/gpu_suite.sh wheels    # HERE, on a CPU machine with PyPI: builds the
#                                          # gitignored benchmarks/wheels/ the GPU run installs
#
# Stages, each under its own `timeout` (seconds; the budgets sum to 515 s, plus
# about 20-40 s of setup and summaries; B_AGENTS, B_GAMES, B_PROGRAM, B_LEARN, B_BANDIT,
# B_DEEPSEA, B_LLM override them), each
# writing its own JSON under $OUT/gpu_suite/ as it goes; a stage that fails or runs out of time
# is recorded with its exit code and the end of its log, and the suite goes on:
#   setup         install the carried wheels if hyperx's imports are missing (below)
#   atari_agents  HyperAgent and DQN, summed agent steps/s at 8 / 32 / 128 agents per program,
#                 one update per agent step, a 10k-transition replay per agent, 500 steps per
#                 agent (Breakout)
#   atari_games_2, atari_games_4   2 and 4 one-game programs (8 HyperAgent agents each) side
#                 by side, summed
#   atari_games_program   the same 2 and 4 games in ONE program (8 agents each, the ALE's
#                 full action set)
#   learning      Alien, 8 seeds in one program, 20k agent steps, evaluated at 20k against the
#                 authors' range (atari_parity.py; summarised from its finished chunks)
#   bandit        regret sweeps at 10,000 seeds (Russo d = 50, K = 1000), seed-rounds/s
#                 against this CPU's benchmarks/results/bandit_throughput.json
#   deepsea       DeepSea(10) at 1,024 seeds
#   llm           the LLM trainer's step time at the benchmark size and 8x wider
#   collect       benchmarks/results/gpu_suite.json: device, versions, this command, every
#                 stage's numbers and command line, the GPU-hour projections
#
# Install on the bare machine: its python3 is itself a venv (/opt/torch/.venv), and a venv made
# from a venv with --system-site-packages sees the BASE interpreter's packages, not that venv's
# jax; so the wheels go to a --target folder (benchmarks/.gpu_site, gitignored) put on
# PYTHONPATH with the checkout (which is what `pip install -e . --no-deps` would give).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
OUT=${OUT:-benchmarks/results}
WHEELS=${WHEELS:-benchmarks/wheels}
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

if [ "$MODE" = wheels ]; then
  "$PY" benchmarks/gpu_suite.py wheels --dir "$WHEELS"
  du -sh "$WHEELS"
  exit 0
fi
[ "$MODE" = run ] || { echo "usage: bash benchmarks/gpu_suite.sh [run|wheels]" >&2; exit 2; }

COMMAND="${DRY_RUN:+DRY_RUN=$DRY_RUN }bash benchmarks/gpu_suite.sh"
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
DIR="$OUT/gpu_suite"
rm -rf "$DIR"
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}

# setup: hyperx and the Atari stack importable, else the carried wheels installed (no network)
SITE=${SITE:-benchmarks/.gpu_site}
IMPORTS='import hyperx, envpool, gymnasium, tensorboardX, jax; print(jax.devices())'
t0=$(date +%s)
{
  if PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "$IMPORTS"; then
    echo '{"installed": false, "note": "hyperx and its imports were already importable"}' \
      > "$DIR/setup.json"
  else
    timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$SITE" "$WHEELS"/*.whl
    printf '{"installed": true, "target": "%s", "wheels": [%s]}\n' "$SITE" \
      "$(cd "$WHEELS" && ls ./*.whl | sed 's|^\./\(.*\)$|"\1"|' | paste -sd, -)" \
      > "$DIR/setup.json"
  fi
} > "$DIR/setup.log" 2>&1 || { cat "$DIR/setup.log" >&2; exit 1; }
if ! PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "$IMPORTS" >/dev/null 2>&1; then
  export PYTHONPATH="$PWD:$PWD/$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "$IMPORTS" | tee -a "$DIR/setup.log"
echo "setup: $(( $(date +%s) - t0 )) s"

# stage NAME BUDGET CMD...: run CMD under `timeout BUDGET`, log, exit code, wall time, command
stage() {
  local name=$1 budget=$2
  shift 2
  echo "$*" > "$DIR/$name.cmd"
  echo "$budget" > "$DIR/$name.budget"
  echo "== $name (at most $budget s): $*"
  local t ms rc=0
  t=$(date +%s%N)
  timeout "$budget" "$@" > "$DIR/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$DIR/$name.rc"
  ms=$(( ($(date +%s%N) - t) / 1000000 ))
  printf '%d.%03d\n' $((ms / 1000)) $((ms % 1000)) > "$DIR/$name.wall"
  tail -n 3 "$DIR/$name.log"
  [ "$rc" = 0 ] || echo "== $name stopped (exit $rc); recorded, going on" >&2
}

# side_by_side K BUDGET: K one-game programs at once, each its own process and JSON
side_by_side() {
  local k=$1 budget=$2 games pids=() rc=0 i
  read -r -a games <<< "$SIDE_GAMES"
  for ((i = 0; i < k; i++)); do
    # shellcheck disable=SC2086
    timeout "$budget" "$PY" benchmarks/gpu_suite.py atari-agents --game "${games[$i]}" \
      --agents "$SIDE_AGENT" --per-program $SIDE_AGENTS $ATARI_SIZES \
      --out "$DIR/atari_games_${k}_${i}.json" > "$DIR/atari_games_${k}_${i}.log" 2>&1 &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  tail -n 2 "$DIR"/atari_games_"${k}"_*.log
  return "$rc"
}
export -f side_by_side

if [ "${DRY_RUN:-0}" = 1 ]; then
  # tiny sizes; side by side, dqn (it compiles in half HyperAgent's time on a CPU) on Breakout
  PER_PROGRAM=2; SIDE_AGENTS=1; SIDE_AGENT=dqn; SIDE_GAMES="Breakout Pong Breakout Pong"
  ATARI_SIZES="--steps 32 --buffer-size 256 --learning-starts 16"
  LEARN="--steps 64 --eval-every 64 --chunk-steps 32 --seeds 2 --seeds-per-program 2
         --eval-episodes 1 --eval-max-steps 30 --random-episodes 1 --learning-starts 16"
  BANDIT="--seeds 8 --steps 20 --dim 4 --arms 16 --cpu-baseline"
  DEEPSEA="--size 4 --steps 64 --seeds 8"
  LLM="--steps 3 --tiny"
  B_AGENTS=240; B_GAMES=200; B_PROGRAM=200; B_LEARN=150; B_BANDIT=60; B_DEEPSEA=60; B_LLM=90
  # the stages' processes share compiled programs (4 games side by side reuse the 2 games'),
  # which only shortens the dry run: its numbers are not measurements
  export JAX_COMPILATION_CACHE_DIR="$DIR/jax_cache"
else
  PER_PROGRAM="8 32 128"; SIDE_AGENTS=8; SIDE_AGENT=hyperagent; SIDE_GAMES="Breakout Alien Pong Freeway"
  ATARI_SIZES="--steps 500 --buffer-size 10000 --learning-starts 32"
  LEARN="--steps 20000 --eval-every 20000 --chunk-steps 5000 --seeds 8 --seeds-per-program 8
         --eval-episodes 5 --random-episodes 3"
  BANDIT="--seeds 10000 --steps 500 --dim 50 --arms 1000"
  DEEPSEA="--size 10 --steps 3000 --seeds 1024"
  LLM="--steps 11"
  B_AGENTS=${B_AGENTS:-110}; B_GAMES=${B_GAMES:-40}; B_PROGRAM=${B_PROGRAM:-60}
  B_LEARN=${B_LEARN:-165}; B_BANDIT=${B_BANDIT:-30}; B_DEEPSEA=${B_DEEPSEA:-30}
  B_LLM=${B_LLM:-40}
fi
export PY DIR SIDE_AGENTS SIDE_AGENT SIDE_GAMES ATARI_SIZES

# shellcheck disable=SC2086
stage atari_agents "$B_AGENTS" "$PY" benchmarks/gpu_suite.py atari-agents \
  --agents hyperagent dqn --per-program $PER_PROGRAM $ATARI_SIZES --out "$DIR/atari_agents.json"
stage atari_games_2 "$B_GAMES" bash -c "side_by_side 2 $B_GAMES"
stage atari_games_4 "$B_GAMES" bash -c "side_by_side 4 $B_GAMES"
# shellcheck disable=SC2086
stage atari_games_program "$B_PROGRAM" "$PY" benchmarks/gpu_suite.py atari-agents \
  --game $SIDE_GAMES --games-per-program 2 4 --agents "$SIDE_AGENT" --per-program $SIDE_AGENTS \
  $ATARI_SIZES --out "$DIR/atari_games_program.json"
# shellcheck disable=SC2086
stage learning "$B_LEARN" "$PY" benchmarks/atari_parity.py --games Alien --agents hyperagent \
  $LEARN --no-checkpoints --no-eval-at-start --out-dir "$DIR/learning" \
  --summary "$DIR/learning.json"
# the learning stage summarised from the chunks it finished, also after its timeout
# shellcheck disable=SC2086
"$PY" benchmarks/atari_parity.py --games Alien --agents hyperagent $LEARN --no-checkpoints \
  --no-eval-at-start --out-dir "$DIR/learning" --summary "$DIR/learning.json" --summarise-only \
  >> "$DIR/learning.log" 2>&1 || echo "learning: no summary" >&2
# shellcheck disable=SC2086
stage bandit "$B_BANDIT" "$PY" benchmarks/gpu_suite.py bandit $BANDIT --out "$DIR/bandit.json"
# shellcheck disable=SC2086
stage deepsea "$B_DEEPSEA" "$PY" benchmarks/gpu_suite.py deepsea $DEEPSEA \
  --out "$DIR/deepsea.json"
# shellcheck disable=SC2086
stage llm "$B_LLM" "$PY" benchmarks/gpu_suite.py llm $LLM --out "$DIR/llm.json"

DRY=()
if [ "${DRY_RUN:-0}" = 1 ]; then DRY=(--dry-run); fi
"$PY" benchmarks/gpu_suite.py collect --dir "$DIR" --out "$OUT/gpu_suite.json" \
  --command "$COMMAND" --started "$STARTED" "${DRY[@]}"
