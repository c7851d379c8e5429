#!/usr/bin/env bash
# CPU benchmark suite: the machine's FMA peak (gptx-bench-peak), its own product
# rates (OpenBLAS sgemm for fp32, with OPENBLAS_CORETYPE/L2_SIZE as given and
# unset, oneDNN's fp32 matmul where gptx-bench-sgemm has --lib onednn, oneDNN
# bf16 matmul for bf16), then gptx training steps under each precision
# policy and PyTorch's CPU variants on the small and gpt2-124M-short configs,
# same thread count for all. Prints each tool's output and a Markdown summary
# at the end. About 7 minutes on 2 cores (torch.compile included). See
# docs/benchmarks.md.
#
#   bench/run_cpu_bench.sh                 # build dir build-bench, 2 threads
#   BUILD_DIR=build THREADS=4 bench/run_cpu_bench.sh
#   PYTHON=/tmp/torch2/bin/python bench/run_cpu_bench.sh   # PyTorch 2.x variants
#
# Environment: BUILD_DIR (default <repo>/build-bench; must contain
# bench/gptx-bench-peak, bench/gptx-bench-train, bench/gptx-bench-sgemm and
# bench/gptx-bench-gemm-ceiling;
# bench/gptx-bench-bf16gemm when built with oneDNN), THREADS (default 2),
# PYTHON (default /usr/bin/python3, needs torch), OUT_DIR (default a temp dir;
# the JSON results are kept there), SKIP_TORCH=1 to run gptx only,
# PRECISIONS (default "fp32 bf16 bf16_pure"; the bf16 ones need oneDNN),
# TORCH_VARIANTS (default "eager fused-adamw+compile autocast autocast+compile"
# with PyTorch 2.x, "eager" with 1.x), SMALL_WARMUP/SMALL_STEPS (2/10),
# BIG_WARMUP/BIG_STEPS (1/5), ROUNDS (3), PEAK_SECONDS (1: each peak figure's time).
# Every figure of the summary is also "% of peak": fp32 ones against the fp32
# FMA peak, bf16 ones against the AVX512_BF16 peak ("—" without it).
#
# The machine's speed drifts (a shared VM: the sgemm reference itself moved
# 245-300 GFLOP/s within one session), so each gptx run is bracketed: its
# reference product (sgemm for fp32, the bf16 matmul for the bf16 policies)
# runs right before and right after it, and the run's "% of reference" is taken
# against the mean of those two. ROUNDS repeats every config and policy; the
# summary gives every round and the median.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh" gptx-bench
SMALL_WARMUP="${SMALL_WARMUP:-2}" SMALL_STEPS="${SMALL_STEPS:-10}"
BIG_WARMUP="${BIG_WARMUP:-1}" BIG_STEPS="${BIG_STEPS:-5}"
ROUNDS="${ROUNDS:-3}"
PRECISIONS="${PRECISIONS:-fp32 bf16 bf16_pure}"

train="$BUILD_DIR/bench/gptx-bench-train"
sgemm="$BUILD_DIR/bench/gptx-bench-sgemm"
bf16gemm="$BUILD_DIR/bench/gptx-bench-bf16gemm"
ceiling="$BUILD_DIR/bench/gptx-bench-gemm-ceiling"
peak="$BUILD_DIR/bench/gptx-bench-peak"
for exe in "$peak" "$train" "$sgemm" "$ceiling"; do
  if [[ ! -x "$exe" ]]; then
    echo "run_cpu_bench.sh: $exe not found; build first:" >&2
    echo "  cmake -S $root -B $BUILD_DIR -DCMAKE_BUILD_TYPE=Release -DGPTX_BUILD_TESTS=OFF" >&2
    echo "  cmake --build $BUILD_DIR -j2" >&2
    exit 1
  fi
done
if [[ ! -x "$bf16gemm" ]]; then
  # without oneDNN the bf16 policies are GPTX_ERR_UNSUPPORTED: measure fp32 only
  echo "run_cpu_bench.sh: $bf16gemm not found (built without oneDNN): fp32 only" >&2
  PRECISIONS="fp32"
fi

flags="$(lscpu | sed -n 's/^Flags: *//p')"
isa=""
for f in avx2 avx512f avx512_bf16 amx_bf16; do
  [[ " $flags " == *" $f "* ]] && isa="$isa $f"
done
model="$(lscpu | sed -n 's/^Model name: *//p')"
echo "== machine: $model, $(nproc) online CPUs; ISA:${isa:- none of avx2 avx512f avx512_bf16 amx_bf16}"
echo "== load: $(uptime | sed 's/.*load average: //')"
echo "== threads: $THREADS; policies: $PRECISIONS; results in $OUT_DIR"
openblas_env=""
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
  [[ -n "${!v+x}" ]] && openblas_env="$openblas_env $v=${!v}"
done
echo "== OpenBLAS environment:${openblas_env:- no OPENBLAS_CORETYPE, no OPENBLAS_L2_SIZE}"
printf '{"model": "%s", "isa": "%s", "nproc": %d, "openblas_env": "%s"}\n' "$model" "${isa# }" \
  "$(nproc)" "${openblas_env# }" >"$OUT_DIR/machine.json"
echo

run() { # name, command...
  local name="$1"; shift
  echo "== $name: $*"
  "$@"
  echo
}
ref_run() { # fp32|bf16, json tag
  if [[ "$1" == fp32 ]]; then
    run "sgemm ($2)" "$sgemm" --threads "$THREADS" --n 2048 --warmup 3 --reps 10 \
      --json "$OUT_DIR/ref-$2.json"
  else
    run "bf16 matmul ($2)" "$bf16gemm" --threads "$THREADS" --n 2048 --warmup 3 --reps 10 \
      --json "$OUT_DIR/ref-$2.json"
  fi
}

# the peak first, with the same threads: every figure below is also "% of peak"
run "peak" "$peak" --threads "$THREADS" --seconds "${PEAK_SECONDS:-1}" --json "$OUT_DIR/peak.json"
# the fp32 references against the peak: OpenBLAS as the environment configures it
# and with its own choice of kernel (a benchmark may unset these; tests never do),
# oneDNN's fp32 matmul where gptx-bench-sgemm has --lib onednn
ref_args=(--threads "$THREADS" --n 2048 --warmup 3 --reps 10)
run "sgemm, OpenBLAS as configured" "$sgemm" "${ref_args[@]}" \
  --json "$OUT_DIR/ref-openblas-configured.json"
run "sgemm, OpenBLAS without OPENBLAS_CORETYPE/L2_SIZE" \
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$sgemm" "${ref_args[@]}" \
  --json "$OUT_DIR/ref-openblas-native.json"
if "$sgemm" --help 2>/dev/null | grep -q -- '--lib'; then
  echo "== fp32 matmul, oneDNN: $sgemm --lib onednn ${ref_args[*]}"
  "$sgemm" --lib onednn "${ref_args[@]}" --json "$OUT_DIR/ref-onednn-fp32.json" ||
    echo "run_cpu_bench.sh: gptx-bench-sgemm --lib onednn failed: no oneDNN fp32 figure" >&2
  echo
else
  echo "== oneDNN fp32 matmul: skipped (gptx-bench-sgemm --help lists no --lib)"
  echo
fi
if [[ -x "$bf16gemm" ]]; then
  run "bf16 matmul, oneDNN" "$bf16gemm" "${ref_args[@]}" --json "$OUT_DIR/ref-bf16-matmul.json"
fi

for cfg in small gpt2-124M-short; do
  run "products alone ($cfg)" "$ceiling" --config "$cfg" --threads "$THREADS" --reps 5 \
    --json "$OUT_DIR/ceiling-$cfg.json"
done
for r in $(seq 1 "$ROUNDS"); do
  for cfg in small gpt2-124M-short; do
    if [[ "$cfg" == small ]]; then w="$SMALL_WARMUP" s="$SMALL_STEPS"; else w="$BIG_WARMUP" s="$BIG_STEPS"; fi
    for p in $PRECISIONS; do
      kind=fp32; [[ "$p" == fp32 ]] || kind=bf16
      tag="$cfg-$p-$r"
      ref_run "$kind" "$tag-before"
      run "gptx $cfg $p (round $r)" "$train" --config "$cfg" --precision "$p" \
        --threads "$THREADS" --warmup "$w" --steps "$s" --json "$OUT_DIR/gptx-$tag.json"
      ref_run "$kind" "$tag-after"
    done
  done
done

if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  tmajor="$("$PYTHON" -c 'import torch; print(torch.__version__.split(".")[0])')"
  if [[ -z "${TORCH_VARIANTS:-}" ]]; then
    if (( tmajor >= 2 )); then
      TORCH_VARIANTS="eager fused-adamw+compile autocast autocast+compile"
    else
      TORCH_VARIANTS="eager"  # torch 1.x: no torch.compile, no fused CPU AdamW
    fi
  fi
  for v in $TORCH_VARIANTS; do
    vflags=()
    [[ "$v" == *fused-adamw* ]] && vflags+=(--fused-adamw)
    [[ "$v" == *compile* ]] && vflags+=(--compile)
    [[ "$v" == *autocast* ]] && vflags+=(--autocast)
    # a compiled model gets one more untimed step: the first two may both compile
    extra=0; [[ "$v" == *compile* ]] && extra=1
    run "torch small $v" "$PYTHON" "$here/torch_bench_train.py" --config small \
      --threads "$THREADS" --warmup "$((SMALL_WARMUP + extra))" --steps "$SMALL_STEPS" \
      "${vflags[@]}" --json "$OUT_DIR/torch-small-$v.json"
    run "torch gpt2-124M-short $v" "$PYTHON" "$here/torch_bench_train.py" \
      --config gpt2-124M-short --threads "$THREADS" --warmup "$((BIG_WARMUP + extra))" \
      --steps "$BIG_STEPS" "${vflags[@]}" --json "$OUT_DIR/torch-gpt2-124M-short-$v.json"
  done
fi

# Markdown summary from the JSON files (python3 standard library only)
"$PYTHON" "$here/cpu_bench_summary.py" "$OUT_DIR" "$ROUNDS" "$PRECISIONS" "${TORCH_VARIANTS:-}"
