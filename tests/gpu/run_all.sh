#!/usr/bin/env bash
# The final call of a GPU session (docs/cuda.md, "Running on a GPU"): build,
# test and benchmark the CUDA backend on a fresh, bare machine, side by side
# with torch.compile and llm.c, in about seven and a half minutes, writing at
# most 8 files into $OUT. tests/gpu/profile_call.sh is the profiling call
# that comes before it.
#
#   bash tests/gpu/run_all.sh [--dry-run] [--budget SECONDS]
#
# The plan (seconds from the start; a group may use what the one before left,
# never more than up to its own end):
#   build  until 120  first the warp-level matrix instructions alone: nvcc
#                     compiles tests/gpu/test_mma_fragments.cu by itself and
#                     runs it, so a wrong fragment layout shows in seconds;
#                     then configure (Ninja, Release, CUDA on,
#                     GPTX_CUDA_ARCHITECTURES = $GPTX_GPU_ARCH, default 90; ptxas
#                     -v; NCCL from the system or python3's nvidia-nccl wheel,
#                     oneDNN from the system or build-gpu-deps/dnnl) and build
#                     only the GPU test binaries and the GPU programs
#   tests  until 240  llm.c's two binaries start compiling in the background
#                     (when build-peers/llmc is carried: it needs no GPU); each
#                     test binary once, directly, under its own timeout (60 s;
#                     the training comparison and the sampler 90 s): the
#                     tensor-core attention first, the one-rank NCCL smoke, the
#                     sampler equivalence test last
#   bench  until the  the attention microbenchmark; gptx-bench-gpu bf16 batch
#          budget     64 with CUDA graphs off and on (each checks that a second
#          (450)      run repeats the first bit for bit); llm.c with cuDNN
#                     attention (after its build); torch.compile; the per-op
#                     profile at batch 64 and 8; the bandwidth benchmark at
#                     batch 8 and 64; compute-sanitizer racecheck on a tiny
#                     attention shape; tf32 and fp32 at batch 64; then, each
#                     only with 1.5 x its expected time left (optional):
#                     PyTorch eager, llm.c's own attention, the largest batch
# A stage starts only with at least 10 s left in its group, and runs under
# min(its limit, the time left). A stage is PASSED, FAILED (exit code or
# timeout), SKIPPED (no device: the tests exit 77, and the benchmarks are then
# not run; an optional stage without its time; racecheck without
# compute-sanitizer or refused by it; llm.c without build-peers/llmc) or NOT
# REACHED (time budget, not built, or what it needs failed).
#
# Files in $OUT (the device tool's output folder; $BUILD/out elsewhere):
#   summary.txt     first lines: the result, then what passed, failed, was not
#                   reached and skipped, whether the CUDA-bf16 vs CPU-bf16
#                   comparison ran, where NCCL, oneDNN and llm.c came from,
#                   whether gptx's steps repeated bit for bit, gptx against
#                   torch.compile and llm.c (tokens/s, ratios, the goals); the
#                   stage table with times; figures
#   build.log       the fragment test's compile, configure and build output
#                   (ptxas -v for every kernel)
#   tests.log       every test's output, the fragment test and racecheck included
#   bench.log       ptxas lines of the attention kernels, then the attention
#                   benchmark, gptx-bench-gpu, the op profiles and the
#                   bandwidth benchmark
#   peers.log       llm.c's build and runs, the PyTorch benchmark's output
#   bench.json      one JSON line per benchmark run
#   nvidia-smi.txt  nvidia-smi -q before, clocks and memory after the benchmarks
# summary.txt is rewritten after every stage, so a call cut short still says
# where it stopped.
#
# --dry-run: no build, no device. Every stage's command is recorded (with its
# timeout) in $BUILD/dry-run-plan.txt instead of run, and the clock is
# simulated: a stage takes its expected time, or what GPTX_GPU_DRY_SIM says:
# a comma-separated list of PATTERN=OUTCOME[:SECONDS] (first match wins;
# PATTERN a shell glob on the stage name; OUTCOME ok, fail, timeout, nodevice
# or exitN). The dry run's machine is the bare device image: no system NCCL or
# oneDNN, python3's NCCL wheel at its usual place, compute-sanitizer present
# (GPTX_GPU_SANITIZER names another program, to simulate its absence), the
# packages in $GPTX_GPU_DEPS_DIR (default build-gpu-deps/) and llm.c's folder
# $GPTX_GPU_LLMC_DIR (default build-peers/llmc) as carried.
# tests/gpu/test_run_all_dry.sh checks the plan that way.
#
# Exit status: 0 when every stage passed or was skipped with a device there, 1
# otherwise.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
root=$PWD

# shellcheck source=tests/gpu/gpu_stages.sh
. "$root/tests/gpu/gpu_stages.sh"
call_setup tests/gpu/run_all.sh 450 summary.txt build.log tests.log bench.log peers.log bench.json \
    nvidia-smi.txt -- "$@"
export PYTHONUNBUFFERED=1 # the PyTorch benchmark's lines reach its log as they come
mkdir -p "$BUILD/mma"
GROUP_ENDS=(build:120 tests:240)
LAST_GROUP=bench
RACE_EXIT=86 # compute-sanitizer's exit status when racecheck reports a hazard
SUMMARY_TITLE="gptx GPU check"

# name | group | limit in s | expected s on an H200 | log | flags (gpu_stages.sh)
PLAN=(
    "mma_nvcc|build|60|4|build.log"
    "test_mma_fragments|build|30|2|tests.log"
    "configure|build|60|10|build.log"
    "build|build|120|30|build.log"
    "llmc_build|tests|240|80|peers.log|bg"
    "test_cuda_flash|tests|60|5|tests.log"
    "test_cuda_kernels|tests|60|8|tests.log"
    "test_cuda_model|tests|60|10|tests.log"
    "test_reference_cuda|tests|60|5|tests.log"
    "test_cuda_train|tests|90|10|tests.log"
    "test_cuda_pure|tests|60|8|tests.log"
    "test_cuda_graphs|tests|60|6|tests.log"
    "test_cuda_timer|tests|60|3|tests.log"
    "test_nccl_single|tests|60|6|tests.log"
    "test_sampler_device|tests|90|15|tests.log"
    "bench_attention|bench|45|8|bench.log"
    "bench_bf16_b64|bench|60|15|bench.log"
    "bench_bf16_b64_graphs|bench|60|15|bench.log"
    "llmc_cudnn|bench|60|15|peers.log"
    "torch_compile_b64|bench|180|100|peers.log"
    "op_profile_b64|bench|60|20|bench.log"
    "bench_bandwidth|bench|60|20|bench.log"
    "op_profile_b8|bench|30|15|bench.log"
    "racecheck_attention|bench|60|25|tests.log"
    "bench_tf32_b64|bench|45|12|bench.log"
    "bench_fp32_b64|bench|60|15|bench.log"
    "torch_eager_b64|bench|60|25|peers.log|opt"
    "llmc_own|bench|45|12|peers.log|opt"
    "bench_bf16_largest|bench|90|30|bench.log|opt"
)
stages_init

# ---- the summary's own lines ----------------------------------------------------------

# Whether test_cuda_model compared the CUDA bf16 policy with the CPU's
# (compare_bf16_implementations prints one of two lines).
bf16_comparison() {
    local i out
    i=$(index_of test_cuda_model)
    case ${S_STATUS[i]} in
    PASSED | FAILED*) ;;
    pending) echo "not run yet"; return ;;
    *) echo "not run (test_cuda_model ${S_STATUS[i]})"; return ;;
    esac
    [ "$DRY" = 1 ] && { echo "(dry run; the build decides: oneDNN $DNNL_NOTE)"; return; }
    out=$(stage_log "$i")
    if grep -q 'bf16 policy: cuda vs cpu fp32' <<<"$out"; then
        echo "ran (test_cuda_model: 'bf16 policy: cuda vs cpu fp32 / cpu bf16 vs cpu fp32 / cuda vs cpu bf16' in tests.log)"
    elif grep -q 'no CPU bf16 policy in this build' <<<"$out"; then
        echo "not run: no CPU bf16 policy in this build (oneDNN $DNNL_NOTE)"
    else
        echo "not run: test_cuda_model stopped before it (see tests.log)"
    fi
}

# lines 6 to 9: the comparison, where things came from, repeatability, peers
summary_extra() {
    echo "CUDA bf16 vs CPU bf16 comparison: $(bf16_comparison)"
    local llmc="llm.c not carried (no build-peers/llmc)"
    llmc_carried && llmc="llm.c from build-peers/llmc (binaries in $(basename "$BUILD")/llmc)"
    echo "dependencies: NCCL $NCCL_NOTE; oneDNN $DNNL_NOTE; $llmc"
    echo "$PEERS"
}

# lines 8 and 9, made again when a benchmark leaves its JSON (keep_figures)
figures_changed() {
    PEERS=$(python3 "$root/tests/gpu/bench_figures.py" peers "$BUILD/json" 2>&1) ||
        PEERS=$(printf '%s\n' "bitwise repeatable: (bench_figures.py failed)" \
            "B 64 bf16, tokens/s, same call: (bench_figures.py failed: $PEERS)")
}
figures_changed

# ---- the stages ------------------------------------------------------------------------

TEST_BINS=(test_cuda_flash test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train
           test_cuda_pure test_cuda_graphs test_cuda_timer test_nccl_single test_sampler_device)
PROGRAMS=(gptx-bench-gpu gptx-bench-attention gptx-op-profile gptx-bench-bandwidth)
FIXTURES=(tests/reference/fixtures/odd_tied_bias.gptxfix tests/reference/fixtures/untied_nobias.gptxfix
          tests/reference/fixtures/padded_unmasked_untied.gptxfix)
MMA_BIN=$BUILD/mma/test_mma_fragments

test_bin() { # NAME: where the build puts test NAME
    case $1 in test_nccl_single) echo "$BUILD/tests/comm/$1" ;; *) echo "$BUILD/tests/gpu/$1" ;; esac
}

# The warp-level matrix instructions before anything else: test_mma_fragments.cu
# compiled alone (only the headers of cuda_mma.h and cuda_internal.h: include/,
# backends/cuda, lib/*, backends/common) and run, so a wrong fragment layout
# table fails within seconds, whatever happens to the build.
do_mma() {
    local inc=(-I"$root/include" -I"$root/backends/cuda" -I"$root/backends/common") d
    for d in "$root"/lib/*/; do inc+=(-I"${d%/}"); done
    rm -f "$MMA_BIN"
    run_stage "$(index_of mma_nvcc)" "$NVCC" -O2 -std=c++17 -arch=sm_"$ARCH" "${inc[@]}" \
        "$root/tests/gpu/test_mma_fragments.cu" -o "$MMA_BIN" -cudart static || {
        not_reached "$(index_of test_mma_fragments)" "nvcc failed: see build.log"
        return 0
    }
    local i
    i=$(index_of test_mma_fragments)
    run_stage "$i" "$MMA_BIN"
    S_FIG[i]=$(stage_log "$i" | grep -m 1 '^test_mma_fragments:')
    write_summary
}

do_tests() {
    local t i bin args
    for t in "${TEST_BINS[@]}"; do
        i=$(index_of "$t")
        bin=$(test_bin "$t")
        if [ $DRY = 0 ] && [ ! -x "$bin" ]; then
            case $t in
            test_nccl_single) not_reached "$i" "not built: NCCL $NCCL_NOTE" ;;
            *) not_reached "$i" "not built" ;;
            esac
            continue
        fi
        args=()
        case $t in
        test_reference_cuda) args=(--precision all "${FIXTURES[@]}") ;;
        test_cuda_train) args=(--steps 50) ;;
        esac
        run_stage "$i" "$bin" "${args[@]}"
        S_FIG[i]=$(tail -n 2 "$OUT/tests.log" | head -n 1) # its last line of output
    done
    write_summary
}

# compute-sanitizer's racecheck (shared-memory hazards) on both attention
# kernel sets at a tiny shape: a hazard fails the stage (--error-exitcode);
# no tool, or a tool that refuses the device (gVisor: "Device not supported"),
# skips it without failing.
racecheck_stage() {
    local i san rc nodevice=$NODEVICE
    i=$(index_of racecheck_attention)
    device_stage_ready "$i" "$ATTN" || return 0
    if ! san=$(sanitizer_path); then
        skipped "$i" "compute-sanitizer is not on this machine"
        return 0
    fi
    run_stage "$i" "$san" --tool racecheck --error-exitcode $RACE_EXIT --print-limit 20 "$ATTN" \
        --batch 1 --heads 2 --seq 130 --head-size 64 --warmup 0 --iters 1
    rc=$?
    if [ $rc = 77 ] || stage_log "$i" | grep -q 'Device not supported'; then
        NODEVICE=$nodevice # the device is there: the sanitizer did not take it
        skipped "$i" "compute-sanitizer refused the device: see tests.log"
    elif [ $rc = $RACE_EXIT ]; then
        S_STATUS[i]="FAILED (exit $RACE_EXIT: racecheck reported a hazard, see tests.log)"
        write_summary
    fi
    S_FIG[i]=$(stage_log "$i" | grep -m 1 'RACECHECK SUMMARY')
    write_summary
}

# llm.c timed (after its background build), when its folder was carried
llmc_stage() { # NAME cudnn|own STEPS
    local i
    i=$(index_of "$1")
    if ! llmc_carried; then
        skipped "$i" "build-peers/llmc not carried"
        return 0
    fi
    if ! bg_wait "$(index_of llmc_build)"; then
        not_reached "$i" "llm.c did not build: see peers.log"
        return 0
    fi
    bench_stage "$1" bash "$root/tests/gpu/llmc_peer.sh" time "$(llmc_dir)" "$(llmc_bin)" "$2" "$3"
}

do_bench() {
    local torch=(python3 bench/gpu/torch_gpu_bench.py)
    bench_stage bench_attention "$ATTN" --batch 8 --heads 12 --seq 1024 --head-size 64 --warmup 3 \
        --iters 20
    bench_stage bench_bf16_b64 "$BENCH" --precision bf16 --batch 64 --warmup 2 --steps 5
    bench_stage bench_bf16_b64_graphs "$BENCH" --precision bf16 --batch 64 --graphs 1 --warmup 2 \
        --steps 5
    llmc_stage llmc_cudnn cudnn 20
    bench_stage torch_compile_b64 "${torch[@]}" --batch 64 --warmup 2 --steps 5
    profile_stage op_profile_b64 64
    bench_stage bench_bandwidth "$BANDWIDTH" --batches 8,64
    profile_stage op_profile_b8 8
    racecheck_stage
    bench_stage bench_tf32_b64 "$BENCH" --precision tf32 --batch 64 --warmup 1 --steps 3 --repeat 0
    bench_stage bench_fp32_b64 "$BENCH" --precision fp32 --batch 64 --warmup 1 --steps 3 --repeat 0
    bench_stage torch_eager_b64 "${torch[@]}" --batch 64 --no-compile --warmup 2 --steps 5
    llmc_stage llmc_own own 12
    bench_stage bench_bf16_largest "$BENCH" --precision bf16 --max-batch 512 --warmup 1 --steps 2 \
        --repeat 0
    machine_after
}

machine_info
write_summary
do_mma
built=0
do_build "${TEST_BINS[@]}" "${PROGRAMS[@]}" || built=1
ptxas_lines 'attention|flash' >>"$OUT/bench.log"
llmc_build_start
[ $built = 0 ] && do_tests
for ((i = 0; i < NST; i++)); do # what the build's failure left behind
    case ${S_NAME[i]} in test_*) [ "${S_STATUS[i]}" = pending ] && not_reached "$i" "no build" ;; esac
done
do_bench
bg_wait "$(index_of llmc_build)" # never left running (a machine without a device gets here first)
write_final_summary
head -n 9 "$OUT/summary.txt"
case $(head -n 1 "$OUT/summary.txt") in *": PASSED,"*) exit 0 ;; *) exit 1 ;; esac
