#!/usr/bin/env bash
# The measurements of docs/ablation.md: gptx-bench and bench/torch_ladder.py
# side by side, for each config and mode, in one session, same thread count.
# Before each run, waits (up to WAIT_MAX seconds) for a quiet machine: 1-minute
# load below 0.7, no compiler, test or benchmark processes, >= 90 % idle CPU
# over 5 s; then measures anyway and says so. The load at the start and end
# of each run is in its output. About 15 minutes of measuring on 2 cores
# with the default step counts.
#
#   bench/ladder/run_ladder.sh                       # build dir build-ladder, 2 threads
#   BUILD_DIR=build THREADS=4 OUT_DIR=/tmp/ladder bench/ladder/run_ladder.sh
#
# Environment: BUILD_DIR (default <repo>/build-ladder, with bench/gptx-bench),
# THREADS (2), OUT_DIR (default a new temp dir; every table, CSV, JSON and
# SVG is kept there), PYTHON (/usr/bin/python3 with torch), CONFIGS ("small
# gpt2-124M-short"), MODES ("cumulative isolated"), SKIP_TORCH=1,
# WAIT_MAX (600 s per run; 0 = do not wait).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$root/build-ladder}"
THREADS="${THREADS:-2}"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/gptx-ladder.XXXXXX)}"
CONFIGS="${CONFIGS:-small gpt2-124M-short}"
MODES="${MODES:-cumulative isolated}"
WAIT_MAX="${WAIT_MAX:-600}"
bench="$BUILD_DIR/bench/gptx-bench"
if [[ ! -x "$bench" ]]; then
  echo "run_ladder.sh: $bench not found; build it first:" >&2
  echo "  cmake -S $root -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release -DGPTX_BUILD_TESTS=OFF" >&2
  echo "  cmake --build $BUILD_DIR -j2 --target gptx-bench" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

load1() { cut -d' ' -f1 /proc/loadavg; }
busy() { # compiler, linker, test or benchmark processes of anyone
  ps -eo comm= | grep -E '^(cc1|cc1plus|ld|collect2|ctest|make|gmake|ninja|test_|gptx-|python)' |
    head -3 | tr '\n' ' '
}
idle_pct() { # share of idle CPU time over the next 5 seconds
  local a b
  a=($(head -1 /proc/stat)); sleep 5; b=($(head -1 /proc/stat))
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( 100 * (b[4] - a[4]) / (total > 0 ? total : 1) ))
}
# Waits until the machine is quiet, at most WAIT_MAX seconds; called before
# every run, since other people's jobs come and go. The load-average test
# only before the first run: the 1-minute average still holds the previous
# run for a minute or two, the idle test does not.
wait_quiet() {
  local waited=0 b max_load="${1:-1000}"
  while (( WAIT_MAX > 0 )); do
    b="$(busy)"
    if awk -v l="$(load1)" -v m="$max_load" 'BEGIN { exit !(l < m) }' && [[ -z "$b" ]] &&
       (( $(idle_pct) >= 90 )); then
      return
    fi
    if (( waited >= WAIT_MAX )); then
      echo "== machine still busy after ${waited} s (load $(load1), busy: ${b:-none}): measuring anyway"
      return
    fi
    echo "== waiting for a quiet machine: load $(load1), busy: ${b:-none}" >&2
    sleep 30
    waited=$((waited + 30))
  done
}

echo "== $(date -u +%FT%TZ); machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) online CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== compiler: $(cc --version | head -1); torch: $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
echo "== threads: $THREADS; results in $OUT_DIR"
status=0
wait_quiet 0.7
for cfg in $CONFIGS; do
  for mode in $MODES; do
    g="$OUT_DIR/gptx-$cfg-$mode"
    wait_quiet
    echo; echo "== gptx-bench --config $cfg --mode $mode --threads $THREADS (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$bench" --config "$cfg" --mode "$mode" --threads "$THREADS" --out-prefix "$g" | tee "$g.md"
    rc=${PIPESTATUS[0]}
    (( rc != 0 )) && { echo "== gptx-bench exit status $rc"; status=1; }
    if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
      t="$OUT_DIR/torch-$cfg-$mode"
      wait_quiet
      echo; echo "== torch_ladder.py --config $cfg --mode $mode --threads $THREADS (load $(cut -d' ' -f1-3 /proc/loadavg))"
      "$PYTHON" "$root/bench/torch_ladder.py" --config "$cfg" --mode "$mode" --threads "$THREADS" \
        --tokens "$g.tokens.bin" --gptx-json "$g.json" --out-prefix "$t" | tee "$t.md"
      rc=${PIPESTATUS[0]}
      (( rc != 0 )) && { echo "== torch_ladder.py exit status $rc"; status=1; }
    fi
  done
done
echo; echo "== done $(date -u +%FT%TZ); load: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT_DIR"
exit $status
