#!/usr/bin/env bash
# The profiling call of a GPU session, before the final tests/gpu/run_all.sh
# (docs/cuda.md, "Running on a GPU"): where a GPT-2 124M step's time goes on
# the device, in about two and a half minutes, writing at most 8 files into
# $OUT. It builds only the CUDA module and the four programs it runs, in
# build-gpu/ configured as run_all.sh configures it, so a final call on the
# machine this one leaves warm rebuilds none of them.
#
#   bash tests/gpu/profile_call.sh [--dry-run] [--budget SECONDS]
#
# The plan (seconds from the start):
#   build    until 90   configure (as run_all.sh) and build gptx_cuda,
#                       gptx-bench-bandwidth, gptx-op-profile, gptx-bench-gpu and
#                       gptx-bench-attention; then llm.c's two binaries start
#                       compiling in the background when build-peers/llmc is
#                       carried (for a final call on this machine, warm)
#   profile  until the  the bandwidth benchmark (every memory-bound op at batch 8
#            budget     and 64 against the device-to-device copy ceiling); the
#            (210)      per-op profile of a bf16 step at batch 8 and at batch 64;
#                       the attention microbenchmark over every tile
#                       configuration (--variant all); then Nsight Compute
#                       (ncu --clock-control none: the clocks as they are) on
#                       the key kernels of a batch-8 step of gptx-bench-gpu:
#                         ncu_colsum     the LayerNorm backward and the column
#                                        sums behind dgamma/dbeta and every bias
#                                        gradient: the first 16 launches (the
#                                        final LayerNorm's and the last layer's)
#                         ncu_attention  the last layer's flash forward and its
#                                        backward's kernels (skips 11 forwards)
#                         ncu_gemm       16 cuBLASLt kernels about the turn from
#                                        forward to backward (skips 44 launches:
#                                        the last layer's forward products, the
#                                        head's, the last layer's backward ones)
#                       each kernel's name, grid, block, duration, DRAM / memory /
#                       SM throughput, registers and occupancy in the summary.
#                       The regular expressions, skips and counts are
#                       GPTX_NCU_{COLSUM,ATTN,GEMM}_{RE,SKIP,COUNT}: kernels renamed
#                       by later work are found by changing them, not this file.
# Stages follow run_all.sh's rules (gpu_stages.sh); ncu missing, or refusing
# the device (gVisor: no counters), skips its stages.
#
# Files in $OUT: summary.txt (result, stages, figures, the ncu table),
# build.log (configure, build with ptxas -v, llm.c's build), bench.log (ptxas
# lines of the LayerNorm, column-sum and attention kernels; the bandwidth and
# attention benchmarks), profile.log (both op profiles), ncu.log (Nsight
# Compute's report, the details page of every profiled kernel), bench.json,
# nvidia-smi.txt.
#
# --dry-run and GPTX_GPU_DRY_SIM as in run_all.sh (GPTX_GPU_NCU names another
# program for ncu, to simulate its absence); test_run_all_dry.sh checks the
# plan. Exit status: 0 when every stage passed or was skipped with a device
# there, 1 otherwise.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
# the cuBLASLt algorithm chosen for each product shape, on stderr (the logs)
export GPTX_CUDA_LT_REPORT=1
root=$PWD

# shellcheck source=tests/gpu/gpu_stages.sh
. "$root/tests/gpu/gpu_stages.sh"
call_setup tests/gpu/profile_call.sh 210 summary.txt build.log bench.log profile.log ncu.log \
    bench.json nvidia-smi.txt -- "$@"
GROUP_ENDS=(build:90)
LAST_GROUP=profile
SUMMARY_TITLE="gptx GPU profile"

PLAN=(
    "configure|build|60|10|build.log"
    "build|build|90|25|build.log"
    "llmc_build|profile|180|80|build.log|bg"
    "bench_bandwidth|profile|60|20|bench.log"
    "op_profile_b8|profile|30|15|profile.log"
    "op_profile_b64|profile|60|20|profile.log"
    "bench_attention|profile|45|12|bench.log"
    "ncu_colsum|profile|60|20|ncu.log"
    "ncu_attention|profile|60|15|ncu.log"
    "ncu_gemm|profile|60|20|ncu.log"
)
stages_init

summary_extra() {
    echo "dependencies: NCCL $NCCL_NOTE; oneDNN $DNNL_NOTE"
    echo "ncu: $(ncu_path || echo 'none on this machine')"
}

# the kernels ncu profiled, one line each (the report's details page in ncu.log)
summary_tail() {
    [ -s "$OUT/ncu.log" ] && [ $DRY = 0 ] || return 0
    echo
    echo "Nsight Compute, batch-8 step (ncu.log has every section):"
    python3 "$root/tests/gpu/bench_figures.py" ncu "$OUT/ncu.log" 2>&1 | sed 's/^/  /'
}

# ncu_stage NAME REGEX SKIP COUNT SECTION...: Nsight Compute on COUNT kernels
# matching REGEX of a batch-8 bf16 step (after SKIP matching launches)
ncu_stage() {
    local i ncu s sec=()
    i=$(index_of "$1")
    device_stage_ready "$i" "$BENCH" || return 0
    if ! ncu=$(ncu_path); then
        skipped "$i" "ncu is not on this machine"
        return 0
    fi
    for s in "${@:5}"; do sec+=(--section "$s"); done
    run_stage "$i" "$ncu" --clock-control none "${sec[@]}" -k "regex:$2" -s "$3" -c "$4" "$BENCH" \
        --precision bf16 --batch 8 --warmup 1 --steps 1 --repeat 0
    if stage_log "$i" | grep -qE '==ERROR==.*(profiler|permission|ERR_NVGPUCTRPERM|not supported)'; then
        skipped "$i" "ncu could not read the counters here: see ncu.log"
    fi
    [ $DRY = 1 ] || S_FIG[i]="$(stage_log "$i" | grep -c '^==PROF== Profiling') kernels profiled"
    write_summary
}

do_profile() {
    bench_stage bench_bandwidth "$BANDWIDTH" --batches 8,64
    profile_stage op_profile_b8 8
    profile_stage op_profile_b64 64
    # every tile configuration of the tensor-core attention (cuda_flash.h), each
    # checked bit for bit against the default: which one the default should be
    bench_stage bench_attention "$ATTN" --batch 8 --heads 12 --seq 1024 --head-size 64 --warmup 3 \
        --iters 20 --variant all
    local base=(SpeedOfLight LaunchStats Occupancy)
    ncu_stage ncu_colsum "${GPTX_NCU_COLSUM_RE:-colsum|column|layernorm_backward|bias_grad}" \
        "${GPTX_NCU_COLSUM_SKIP:-0}" "${GPTX_NCU_COLSUM_COUNT:-16}" "${base[@]}" MemoryWorkloadAnalysis
    ncu_stage ncu_attention "${GPTX_NCU_ATTN_RE:-flash|attention}" "${GPTX_NCU_ATTN_SKIP:-11}" \
        "${GPTX_NCU_ATTN_COUNT:-4}" "${base[@]}" ComputeWorkloadAnalysis WarpStateStats
    ncu_stage ncu_gemm "${GPTX_NCU_GEMM_RE:-gemm|nvjet|xmma|cutlass|splitK}" \
        "${GPTX_NCU_GEMM_SKIP:-44}" "${GPTX_NCU_GEMM_COUNT:-16}" "${base[@]}"
    machine_after
}

machine_info
write_summary
built=0
do_build gptx-bench-bandwidth gptx-op-profile gptx-bench-gpu gptx-bench-attention || built=1
ptxas_lines 'colsum|layernorm|flash|attention' >>"$OUT/bench.log"
llmc_build_start
if [ $built = 0 ]; then
    do_profile
else
    for ((i = 0; i < NST; i++)); do
        [ "${S_STATUS[i]}" = pending ] && [ "${S_NAME[i]}" != llmc_build ] && not_reached "$i" "no build"
    done
fi
bg_wait "$(index_of llmc_build)"
write_final_summary
head -n 7 "$OUT/summary.txt"
[ $DRY = 0 ] && sed -n '/^Nsight Compute/,$p' "$OUT/summary.txt"
case $(head -n 1 "$OUT/summary.txt") in *": PASSED,"*) exit 0 ;; *) exit 1 ;; esac
