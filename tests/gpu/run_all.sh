#!/usr/bin/env bash
# The one script a GPU session runs (docs/cuda.md, "Running on a GPU"):
#
#   tests/gpu/run_all.sh [build] [test] [bench] [sanitize] [all]    (default: all)
#
#   build     configure and build with the CUDA backend (Release, -j$(nproc))
#             in build-gpu/, only the targets the other stages need; when the
#             machine lacks OpenBLAS / jansson / PCRE2 / pkg-config, the .deb
#             files in build-gpu-deps/ (tests/gpu/fetch_deps.sh; carry the
#             folder) are unpacked into a private prefix first
#   test      ctest -L gpu (every kernel against the CPU backend, the products
#             with GELU epilogues and the fused residual + LayerNorm, the model
#             in fp32 and bf16 mixed (bf16 activations, fp32 master weights),
#             the reference fixtures in fp32/tf32/bf16, the 50-step training
#             comparison, pure bf16 with and without stochastic rounding,
#             sampler equivalence, CUDA graphs on/off bitwise, the event
#             timer), then the fixtures, the training comparison, the
#             pure-bf16 test and the graphs and timer tests again into their
#             own logs
#   bench     gptx-bench-gpu (bf16 at the largest power-of-two batch; bf16
#             with CUDA graphs off and on, bf16_pure, tf32, fp32 at batch 64)
#             and bench/gpu/torch_gpu_bench.py (batch 64)
#   sanitize  compute-sanitizer memcheck and racecheck on the kernel test,
#             memcheck on the model test (its bf16 runs)
#   all       build test bench
#
# Logs go to $OUT (the device tool's output folder; build-gpu/out otherwise):
# summary.log, build.log, ctest.log, reference.log, train.log, pure.log, graphs.log,
# bench.log, torch.log, sanitize.log. Every stage runs under a time limit; a failing
# stage is logged and the script goes on (it exits 1 if any stage failed).
# The device tool allows 10 minutes per command: run `build test` in one call
# and `bench` (then `sanitize` if time is left) in the next.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
BUILD=${GPTX_GPU_BUILD:-$root/build-gpu}
OUT=${OUT:-$BUILD/out}
JOBS=${GPTX_JOBS:-$(nproc 2>/dev/null || echo 8)}
mkdir -p "$OUT" "$BUILD"
failed=0

say() { echo "$*" | tee -a "$OUT/summary.log"; }

# stage NAME LOG LIMIT_S COMMAND...: runs the command with its output
# appended to LOG, under a time limit; records the outcome in the summary.
stage() {
    local name=$1 log=$OUT/$2 limit=$3
    shift 3
    local t0=$SECONDS
    echo "===== $name: $*" >>"$log"
    timeout --kill-after=15 "$limit" "$@" >>"$log" 2>&1
    local rc=$?
    local verdict=ok
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMEOUT after ${limit}s"
    elif [ $rc -eq 77 ]; then verdict="SKIPPED: no device"
    elif [ $rc -ne 0 ]; then verdict="FAILED (exit $rc)"; fi
    [ "$verdict" = ok ] || failed=1
    say "$(printf '%-28s %-22s %4ds  -> %s' "$name" "$verdict" $((SECONDS - t0)) "$(basename "$log")")"
    return $rc
}

# The dependency prefix, when the machine lacks the build dependencies.
cmake_extra=()
deps_prefix=${GPTX_GPU_DEPS_PREFIX:-/opt/gptx-deps}
setup_deps() {
    local missing=()
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    if command -v pkg-config >/dev/null 2>&1; then
        pkg-config --exists jansson || missing+=(jansson)
        pkg-config --exists libpcre2-8 || missing+=(pcre2)
    fi
    local h found=
    for h in /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/x86_64-linux-gnu/cblas.h \
             /usr/include/cblas.h /usr/include/openblas/cblas.h; do
        [ -e "$h" ] && found=1
    done
    [ -n "$found" ] || missing+=(openblas)
    if [ ${#missing[@]} -eq 0 ] && [ -z "${GPTX_GPU_FORCE_DEPS:-}" ]; then
        say "dependencies: from the system"
        return 0
    fi
    say "dependencies missing on this machine: ${missing[*]:-none (forced)}"
    if ! ls "$root"/build-gpu-deps/*.deb >/dev/null 2>&1; then
        say "no build-gpu-deps/*.deb to unpack: run tests/gpu/fetch_deps.sh and carry build-gpu-deps"
        return 1
    fi
    mkdir -p "$deps_prefix"
    for deb in "$root"/build-gpu-deps/*.deb; do
        if command -v dpkg-deb >/dev/null 2>&1; then
            dpkg-deb -x "$deb" "$deps_prefix" || return 1
        else
            (cd "$(mktemp -d)" && ar x "$deb" && tar -xf data.tar.* -C "$deps_prefix") || return 1
        fi
    done
    local lib=$deps_prefix/usr/lib/x86_64-linux-gnu
    export PATH=$deps_prefix/usr/bin:$PATH
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$deps_prefix/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$deps_prefix
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -e "$deps_prefix/usr/bin/pkg-config" ] || ln -sf pkgconf "$deps_prefix/usr/bin/pkg-config"
    cmake_extra+=(-DCMAKE_PREFIX_PATH="$deps_prefix/usr"
                  -DGPTX_CBLAS_INCLUDE_DIR="$deps_prefix/usr/include/x86_64-linux-gnu/openblas-pthread"
                  -DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so")
    say "dependencies: unpacked into $deps_prefix"
}

find_bin() { find "$BUILD" -maxdepth 4 -type f -name "$1" -perm -u+x 2>/dev/null | head -n 1; }

do_build() {
    say "== build ($(date -u +%FT%TZ), $JOBS jobs)"
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
        nvcc --version | tail -n 2 || true
        cmake --version | head -n 1 || true
    } >>"$OUT/summary.log" 2>&1
    setup_deps || { failed=1; return 1; }
    local hook=()
    grep -q 'add_subdirectory(gpu)' tests/CMakeLists.txt 2>/dev/null ||
        hook=(-DCMAKE_PROJECT_INCLUDE="$root/tests/gpu/cmake_hook.cmake")
    stage "configure" build.log 300 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGPTX_CUDA=ON \
        -DGPTX_MPI=OFF -DGPTX_NCCL=OFF -DGPTX_BUILD_EXAMPLES=OFF "${hook[@]}" "${cmake_extra[@]}" ||
        return 1
    stage "build" build.log 420 cmake --build "$BUILD" -j"$JOBS" --target gptx gptx_static \
        test_cuda_nodevice test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train \
        test_cuda_pure test_cuda_graphs test_cuda_timer \
        test_sampler_device gptx-bench-gpu
}

do_test() {
    say "== test"
    stage "ctest -L gpu" ctest.log 300 ctest --test-dir "$BUILD" -L gpu --output-on-failure \
        --timeout 240
    if grep -q 'Skipped' "$OUT/ctest.log"; then
        say "ctest: some gpu tests were SKIPPED (no usable device?)"
        failed=1
    fi
    local fixtures=("$root"/tests/reference/fixtures/*.gptxfix)
    local ref train pure
    ref=$(find_bin test_reference_cuda)
    train=$(find_bin test_cuda_train)
    pure=$(find_bin test_cuda_pure)
    if [ -n "$ref" ]; then
        stage "reference fixtures" reference.log 120 "$ref" --precision all "${fixtures[@]}"
    else
        say "reference fixtures: test_reference_cuda was not built"; failed=1
    fi
    if [ -n "$train" ]; then
        stage "50 steps bf16 vs cpu fp32" train.log 180 "$train" --steps 50
        grep -E '^loss gap|^final loss' "$OUT/train.log" | tail -n 2 | tee -a "$OUT/summary.log"
    else
        say "training comparison: test_cuda_train was not built"; failed=1
    fi
    if [ -n "$pure" ]; then
        stage "pure bf16, round to nearest and stochastic" pure.log 120 "$pure"
        grep -E '^loss gap|^small updates|^sr rerun|^checkpoint' "$OUT/pure.log" |
            tee -a "$OUT/summary.log"
    else
        say "pure bf16: test_cuda_pure was not built"; failed=1
    fi
    local graphs timer
    graphs=$(find_bin test_cuda_graphs)
    timer=$(find_bin test_cuda_timer)
    if [ -n "$graphs" ] && [ -n "$timer" ]; then
        stage "CUDA graphs off/on bitwise" graphs.log 120 "$graphs"
        stage "event timer" graphs.log 60 "$timer"
        grep -E 'bitwise equal|^intervals' "$OUT/graphs.log" | tee -a "$OUT/summary.log"
    else
        say "graphs/timer: test_cuda_graphs or test_cuda_timer was not built"; failed=1
    fi
}

do_bench() {
    say "== bench"
    local bench
    bench=$(find_bin gptx-bench-gpu)
    if [ -z "$bench" ]; then
        say "bench: gptx-bench-gpu was not built"; failed=1
        return 1
    fi
    stage "gptx bf16, largest batch" bench.log 150 "$bench" --precision bf16 --json "$BUILD/b1.json"
    stage "gptx bf16, batch 64" bench.log 90 "$bench" --precision bf16 --batch 64 --json "$BUILD/b2.json"
    stage "gptx bf16, batch 64, graphs" bench.log 90 "$bench" --precision bf16 --batch 64 --graphs 1 \
        --json "$BUILD/b3.json"
    stage "gptx bf16_pure, batch 64" bench.log 90 "$bench" --precision bf16_pure --batch 64 \
        --warmup 1 --steps 5
    stage "gptx tf32, batch 64" bench.log 90 "$bench" --precision tf32 --batch 64 --warmup 1 --steps 3
    stage "gptx fp32, batch 64" bench.log 120 "$bench" --precision fp32 --batch 64 --warmup 1 --steps 3
    for j in "$BUILD"/b1.json "$BUILD"/b2.json "$BUILD"/b3.json; do [ -f "$j" ] && cat "$j" >>"$OUT/bench.log"; done
    grep -E '^(batch  |throughput|memory|cold|graphs)' "$OUT/bench.log" | tee -a "$OUT/summary.log"
    if command -v python3 >/dev/null 2>&1; then
        export PYTHONUNBUFFERED=1
        stage "pytorch compile, batch 64" torch.log 300 python3 \
            bench/gpu/torch_gpu_bench.py --batch 64 --json "$BUILD/torch.json"
        [ -f "$BUILD/torch.json" ] && cat "$BUILD/torch.json" >>"$OUT/torch.log"
        grep -E '^(batch  |throughput|memory|cold)' "$OUT/torch.log" | tee -a "$OUT/summary.log"
    else
        say "pytorch: no python3"; failed=1
    fi
}

do_sanitize() {
    say "== sanitize"
    local kern
    kern=$(find_bin test_cuda_kernels)
    if ! command -v compute-sanitizer >/dev/null 2>&1 || [ -z "$kern" ]; then
        say "sanitize: compute-sanitizer or test_cuda_kernels missing"; failed=1
        return 1
    fi
    stage "memcheck kernels (fp32)" sanitize.log 240 compute-sanitizer --tool memcheck \
        --leak-check full --error-exitcode 9 "$kern"
    stage "racecheck attention" sanitize.log 240 compute-sanitizer --tool racecheck \
        --error-exitcode 9 "$kern" attention
    # the bf16 kernels (templated on the activation type) run only through the model
    local model
    model=$(find_bin test_cuda_model)
    [ -n "$model" ] && stage "memcheck model (fp32 + bf16)" sanitize.log 240 compute-sanitizer \
        --tool memcheck --error-exitcode 9 "$model"
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
for s in "${stages[@]}"; do
    case $s in
    build) do_build ;;
    test) do_test ;;
    bench) do_bench ;;
    sanitize) do_sanitize ;;
    all) do_build && do_test; do_bench ;;
    *) say "unknown stage '$s' (build, test, bench, sanitize, all)"; failed=1 ;;
    esac
done
say "== done: $([ $failed -eq 0 ] && echo 'all stages ok' || echo 'some stage FAILED or was SKIPPED (a skip means no usable device: on the GPU machine that is a failure)') (logs in $OUT)"
exit $failed
