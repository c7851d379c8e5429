#!/usr/bin/env bash
# A device call that times one change side by side (docs/cuda.md, "Running on
# a GPU"): the working tree against BASE, a copy of an earlier tree (e.g.
# `git archive COMMIT | tar -x -C build-ab/base`, carried), built alike and
# run alternately on the same GPU in the same call, so the ratio holds while
# clocks and neighbours drift.
#
#   bash tests/gpu/ab_call.sh BASE [ROUNDS]
#
# Both trees build only the CUDA module and the benchmark programs (Release,
# sm_$GPTX_GPU_ARCH, default 90; no MPI, NCCL or oneDNN: the benchmarks need
# none), into build-ab/build-base and build-ab/build-new, at once. Then ROUNDS (default 2)
# rounds of base, new: gptx-bench-gpu bf16 at batch 64 with graphs (each
# run's tokens/s), and the attention microbenchmark at B 8, H 12, T 1024,
# head 64; then, once each, the per-op profile at batch 64 and the bandwidth
# benchmark at batch 8 and 64, and the attention at head 128 (H 6) for the
# new tree. Files in $OUT: ab.log (everything), ab.txt (the figures, base
# then new, and the ratios). About 150 s on an H200 after the machine starts.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
root=$PWD
base=${1:?usage: tests/gpu/ab_call.sh BASE [ROUNDS]}
rounds=${2:-2}
[ -f "$base/CMakeLists.txt" ] || { echo "ab_call: $base is not a gptx source tree" >&2; exit 2; }
base=$(cd "$base" && pwd)
OUT=${OUT:-$root/build-ab/out}
mkdir -p "$OUT"
log=$OUT/ab.log txt=$OUT/ab.txt
: >"$log"
: >"$txt"

# the dependency set-up of the other device calls (OpenBLAS, jansson, PCRE2
# from build-gpu-deps when the machine lacks them)
# shellcheck disable=SC2034 # read by gpu_stages.sh
DRY=0
# shellcheck disable=SC2034
DEPS_DIR=${GPTX_GPU_DEPS_DIR:-$root/build-gpu-deps}
# shellcheck disable=SC2034
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# shellcheck source=tests/gpu/gpu_stages.sh
. "$root/tests/gpu/gpu_stages.sh"
setup_deps >>"$log" 2>&1 || { echo "ab_call: dependencies missing (see ab.log)"; exit 1; }
gen=(-G Ninja)
command -v ninja >/dev/null 2>&1 || gen=(-G "Unix Makefiles")
arch=${GPTX_GPU_ARCH:-90}
jobs=$(( $(nproc 2>/dev/null || echo 16) / 2 ))
targets=(gptx_cuda gptx-bench-gpu gptx-bench-attention gptx-op-profile gptx-bench-bandwidth)

build_tree() { # SRC BUILD
    cmake -S "$1" -B "$2" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGPTX_CUDA=ON \
        -DGPTX_CUDA_ARCHITECTURES="$arch" -DGPTX_MPI=OFF -DGPTX_NCCL=OFF -DGPTX_DNNL=OFF \
        -DGPTX_BUILD_TESTS=OFF -DGPTX_BUILD_EXAMPLES=OFF "${cmake_extra[@]}" >"$2.log" 2>&1 &&
        cmake --build "$2" -j"$jobs" --target "${targets[@]}" >>"$2.log" 2>&1
}
t0=$SECONDS
mkdir -p build-ab
build_tree "$base" build-ab/build-base & pb=$!
build_tree "$root" build-ab/build-new & pn=$!
ok=1
wait $pb || ok=0
wait $pn || ok=0
cat build-ab/build-base.log build-ab/build-new.log >>"$log"
echo "built both trees in $((SECONDS - t0)) s" | tee -a "$txt"
[ $ok = 1 ] || { echo "ab_call: a build failed (see ab.log)" | tee -a "$txt"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >>"$txt" 2>&1

run() { # TREE LABEL PROGRAM ARGS...: GPTX_MODULE_PATH finds that tree's cuda module
    local tree=$1 label=$2 prog=$3
    shift 3
    echo "===== $tree $label: $prog $*" >>"$log"
    GPTX_MODULE_PATH=$root/build-ab/build-$tree timeout 120 "$root/build-ab/build-$tree/$prog" "$@" \
        >"$OUT/last.txt" 2>&1
    local rc=$?
    cat "$OUT/last.txt" >>"$log"
    [ $rc = 0 ] || echo "$tree $label: exit $rc" >>"$txt"
    return $rc
}
tok() { sed -n 's/^throughput *: \([0-9]*\) tokens\/s.*/\1/p' "$OUT/last.txt"; }
att() { sed -n 's/^  tensor cores  forward .* \([0-9.]*\) TFLOP\/s   backward .* \([0-9.]*\) TFLOP\/s$/\1 \2/p' "$OUT/last.txt"; }

declare -A TOK ATT
for ((r = 1; r <= rounds; r++)); do
    for tree in base new; do
        run $tree "bench B64 r$r" bench/gpu/gptx-bench-gpu --precision bf16 --batch 64 --graphs 1 \
            --warmup 2 --steps 5 --repeat 0
        TOK[$tree]="${TOK[$tree]:-} $(tok)"
        run $tree "attention r$r" bench/gpu/gptx-bench-attention --batch 8 --heads 12 --seq 1024 \
            --head-size 64 --warmup 3 --iters 20
        ATT[$tree]="${ATT[$tree]:-} | $(att)"
    done
done
for tree in base new; do
    echo "$tree: B64 bf16 graphs tokens/s:${TOK[$tree]}; attention fwd bwd TFLOP/s${ATT[$tree]}" >>"$txt"
done
python3 - "${TOK[base]}" "${TOK[new]}" >>"$txt" <<'PY'
import sys
b = [float(x) for x in sys.argv[1].split()]; n = [float(x) for x in sys.argv[2].split()]
if b and n:
    mb, mn = max(b), max(n)
    print(f"new / base, best of each: {mn / mb:.4f} ({mn:.0f} / {mb:.0f} tokens/s; "
          f"MFU {mn * 7.98e8 / 989e12 * 100:.1f} % / {mb * 7.98e8 / 989e12 * 100:.1f} %)")
PY
for tree in base new; do
    run $tree "op profile B64" bench/gptx-op-profile --backend cuda --config gpt2-124M \
        --precision bf16 --batch 64 --warmup 2 --steps 3
    { grep -E '^step:|^attention_backward|^layernorm_backward_act' "$OUT/last.txt"
      sed -n '/^group /,/^outside the ops/p' "$OUT/last.txt"; } | sed "s/^/$tree op profile: /" >>"$txt"
    run $tree "bandwidth" bench/gpu/gptx-bench-bandwidth --batches 8,64
    grep -E 'layernorm_backward|bias gradient|op timings within' "$OUT/last.txt" |
        sed "s/^/$tree bandwidth: /" >>"$txt"
done
run new "attention head 128" bench/gpu/gptx-bench-attention --batch 8 --heads 6 --seq 1024 \
    --head-size 128 --warmup 3 --iters 20
echo "new attention head 128 (H 6) fwd bwd TFLOP/s: $(att)" >>"$txt"
rm -f "$OUT/last.txt"
echo "done in $((SECONDS - t0)) s" >>"$txt"
cat "$txt"
