#!/usr/bin/env bash
# CPU benchmark suite: OpenBLAS sgemm reference, then gptx and PyTorch training
# steps on the small and gpt2-124M-short configs, same thread count for all.
# Prints each tool's output and a Markdown summary at the end. About 5-10
# minutes on 2 cores. See docs/benchmarks.md.
#
#   bench/run_cpu_bench.sh                 # build dir build-bench, 2 threads
#   BUILD_DIR=build THREADS=4 bench/run_cpu_bench.sh
#
# Environment: BUILD_DIR (default <repo>/build-bench; must contain
# bench/gptx-bench-train and bench/gptx-bench-sgemm), THREADS (default 2),
# PYTHON (default /usr/bin/python3, needs torch), OUT_DIR (default a temp dir;
# the JSON results are kept there), SKIP_TORCH=1 to run gptx only,
# SMALL_WARMUP/SMALL_STEPS (2/10), BIG_WARMUP/BIG_STEPS (1/5), ROUNDS (3).
#
# The machine's speed drifts (a shared VM: the sgemm reference itself moved
# 245-300 GFLOP/s within one session), so each gptx run is bracketed: sgemm
# runs right before and right after it, and the run's "% of sgemm" is taken
# against the mean of those two. ROUNDS repeats sgemm/small/sgemm/124M/sgemm;
# the summary gives every round and the median.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
BUILD_DIR="${BUILD_DIR:-$root/build-bench}"
THREADS="${THREADS:-2}"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/gptx-bench.XXXXXX)}"
SMALL_WARMUP="${SMALL_WARMUP:-2}" SMALL_STEPS="${SMALL_STEPS:-10}"
BIG_WARMUP="${BIG_WARMUP:-1}" BIG_STEPS="${BIG_STEPS:-5}"
mkdir -p "$OUT_DIR"

train="$BUILD_DIR/bench/gptx-bench-train"
sgemm="$BUILD_DIR/bench/gptx-bench-sgemm"
for exe in "$train" "$sgemm" "$BUILD_DIR/bench/gptx-bench-gemm-ceiling"; do
  if [[ ! -x "$exe" ]]; then
    echo "run_cpu_bench.sh: $exe not found; build first:" >&2
    echo "  cmake -S $root -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release -DGPTX_BUILD_TESTS=OFF" >&2
    echo "  cmake --build $BUILD_DIR -j2" >&2
    exit 1
  fi
done

# the same thread count for every library on both sides
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) online CPUs; load: $(uptime | sed 's/.*load average: //')"
echo "== threads: $THREADS; results in $OUT_DIR"
echo

run() { # name, command...
  local name="$1"; shift
  echo "== $name: $*"
  "$@"
  echo
}

ceiling="$BUILD_DIR/bench/gptx-bench-gemm-ceiling"
for cfg in small gpt2-124M-short; do
  run "products alone ($cfg)" "$ceiling" --config "$cfg" --threads "$THREADS" --reps 5 \
    --json "$OUT_DIR/ceiling-$cfg.json"
done
ROUNDS="${ROUNDS:-3}"
sgemm_run() { # index
  run "sgemm $1" "$sgemm" --threads "$THREADS" --n 2048 --warmup 3 --reps 10 --json "$OUT_DIR/sgemm-$1.json"
}
k=0
sgemm_run $k
for r in $(seq 1 "$ROUNDS"); do
  run "gptx small (round $r)" "$train" --config small --threads "$THREADS" \
    --warmup "$SMALL_WARMUP" --steps "$SMALL_STEPS" --json "$OUT_DIR/gptx-small-$r.json"
  k=$((k + 1)); sgemm_run $k
  run "gptx gpt2-124M-short (round $r)" "$train" --config gpt2-124M-short --threads "$THREADS" \
    --warmup "$BIG_WARMUP" --steps "$BIG_STEPS" --json "$OUT_DIR/gptx-gpt2-124M-short-$r.json"
  k=$((k + 1)); sgemm_run $k
done
if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  run "torch small" "$PYTHON" "$here/torch_bench_train.py" --config small --threads "$THREADS" \
    --warmup "$SMALL_WARMUP" --steps "$SMALL_STEPS" --json "$OUT_DIR/torch-small.json"
  run "torch gpt2-124M-short" "$PYTHON" "$here/torch_bench_train.py" --config gpt2-124M-short \
    --threads "$THREADS" --warmup "$BIG_WARMUP" --steps "$BIG_STEPS" \
    --json "$OUT_DIR/torch-gpt2-124M-short.json"
  k=$((k + 1)); sgemm_run $k
fi

# Markdown summary from the JSON files (python3 standard library only)
"$PYTHON" - "$OUT_DIR" "$ROUNDS" <<'EOF'
import json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    p = os.path.join(d, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
sg = [load(f"sgemm-{k}") for k in range(2 * rounds + 2)]
sg = [s for s in sg if s]
rates = [s["gflops"] for s in sg]
print(f"## CPU benchmark summary ({sg[0]['threads']} threads, {rounds} rounds)\n")
print("OpenBLAS sgemm 2048^3 (median of 10 each), in run order: "
      + ", ".join(f"{r:.1f}" for r in rates) + " GFLOP/s.\n")
print("Each gptx run against the mean of the sgemm runs right before and after it:\n")
print("| config | round | gptx tokens/s | gptx GFLOP/s | sgemm before / after | % of sgemm |")
print("|---|---:|---:|---:|---:|---:|")
MiB = 2.0 ** 20
med = {}
for cfg, first in (("small", 0), ("gpt2-124M-short", 1)):
    shares = []
    for r in range(1, rounds + 1):
        g = load(f"gptx-{cfg}-{r}")
        if g is None:
            continue
        k = 2 * (r - 1) + first  # sgemm index right before this run
        ref = (rates[k] + rates[k + 1]) / 2
        shares.append(100 * g["gflops"] / ref)
        print(f"| {cfg} | {r} | {g['tokens_per_s']:.0f} | {g['gflops']:.1f} "
              f"| {rates[k]:.1f} / {rates[k + 1]:.1f} | {shares[-1]:.1f} % |")
    if shares:
        med[cfg] = statistics.median(shares)
print()
for cfg, m in med.items():
    print(f"- {cfg}: median {m:.1f} % of the bracketing sgemm rate")
print()
print("| config | gptx tokens/s (median) | gptx GFLOP/s | torch tokens/s | torch GFLOP/s "
      "| gptx/torch | gptx median step | gptx cold first step | gptx peak memory (library) "
      "| gptx max RSS | torch max RSS |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for cfg in ("small", "gpt2-124M-short"):
    runs = [load(f"gptx-{cfg}-{r}") for r in range(1, rounds + 1)]
    runs = [g for g in runs if g]
    if not runs:
        continue
    g = sorted(runs, key=lambda x: x["tokens_per_s"])[len(runs) // 2]
    t = load("torch-" + cfg)
    ttok = f"{t['tokens_per_s']:.0f}" if t else "-"
    tgf = f"{t['gflops']:.1f}" if t else "-"
    ratio = f"{g['tokens_per_s'] / t['tokens_per_s']:.2f}x" if t else "-"
    trss = f"{t['max_rss_bytes'] / MiB:.0f} MiB" if t else "-"
    print(f"| {cfg} (B{g['batch']} T{g['seq']}) | {g['tokens_per_s']:.0f} | {g['gflops']:.1f} "
          f"| {ttok} | {tgf} | {ratio} "
          f"| {g['step_median_s']:.3f} s | {g['cold_step_s']:.3f} s "
          f"| {g['mem_peak_bytes'] / MiB:.0f} MiB | {g['max_rss_bytes'] / MiB:.0f} MiB | {trss} |")
print()
print("Products alone (gptx-bench-gemm-ceiling: the weight products of one step, back to back, "
      "nothing else): the most any step that uses OpenBLAS at these shapes can reach.\n")
print("| config | OpenBLAS threads | split by the pool (as gptx) | best, % of first sgemm |")
print("|---|---:|---:|---:|")
for cfg in ("small", "gpt2-124M-short"):
    c = load("ceiling-" + cfg)
    if c is None:
        continue
    best = max(c["ceiling_openblas_threads_gflops"], c["ceiling_split_gflops"])
    print(f"| {cfg} | {c['ceiling_openblas_threads_gflops']:.1f} GFLOP/s "
          f"| {c['ceiling_split_gflops']:.1f} GFLOP/s | {best:.1f} ({100 * best / rates[0]:.0f} %) |")
print()
for cfg in ("small", "gpt2-124M-short"):
    g = load(f"gptx-{cfg}-1")
    if g is None:
        continue
    ph = g["phase_median_s"]
    parts = ", ".join(f"{k} {v:.3f} s ({100 * v / g['step_median_s']:.0f} %)" for k, v in ph.items())
    print(f"- gptx {cfg} step phases (round 1, medians): {parts}")
EOF
