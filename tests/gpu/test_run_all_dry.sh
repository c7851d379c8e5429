#!/usr/bin/env bash
# tests/gpu/run_all.sh --dry-run on a simulated clock (no build, no device):
# the plan of the one GPU call (the fragment test compiled alone and run
# before configure; the NCCL and oneDNN flags of the configure line; every test
# run directly under its own 60-90 s timeout, the tensor-core attention first,
# the NCCL smoke before the sampler, the sampler last; the attention benchmark,
# racecheck with a failing exit status, the op profile before the model
# benchmarks; torch.compile only with time left; the groups within the 360 s
# budget, at most 8 files back), the ptxas filter, and the summary's first
# lines for a failing, a timed-out, an unreached stage, a racecheck hazard, a
# fragment test that fails or cannot be compiled, a sanitizer that is missing
# or refuses the device, and a machine without a device.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# dry NAME [SIM]: runs the dry run into $tmp/NAME, sets rc. DEPS names the
# carried packages' folder (default: none), SAN the sanitizer program.
mkdir -p "$tmp/nodeps" "$tmp/deps/dnnl"
for p in libdnnl2_2.6.3-1 libdnnl-dev_2.6.3-1 ocl-icd-libopencl1_2.3.1-1 libgomp1_12.2.0-14; do
    : >"$tmp/deps/dnnl/${p}_amd64.deb"
done
dry() {
    local dir=$tmp/$1
    GPTX_GPU_BUILD=$dir OUT=$dir/out GPTX_GPU_DRY_SIM=${2:-} GPTX_JOBS=16 \
        GPTX_GPU_DEPS_DIR=${DEPS:-$tmp/nodeps} GPTX_GPU_SANITIZER=${SAN:-} \
        bash "$here/run_all.sh" --dry-run >"$dir.stdout" 2>&1
    rc=$?
    plan=$dir/dry-run-plan.txt
    summary=$dir/out/summary.txt
}
stages() { cut -d'|' -f1 "$plan" | tr '\n' ' '; }
line() { sed -n "$1p" "$summary"; }
has() { grep -q -e "$2" <<<"$1" || fail "$3: '$2' not in: $1"; }
step() { grep "^$1|" "$plan"; }           # the plan's line of stage $1
limit_of() { step "$1" | cut -d'|' -f3; } # its timeout

tests="test_cuda_flash test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train"
tests+=" test_cuda_pure test_cuda_graphs test_cuda_timer test_nccl_single test_sampler_device"
bench="bench_attention racecheck_attention op_profile_bf16 bench_bf16_b64 bench_bf16_b64_graphs"
bench+=" bench_bf16_largest bench_fp32_b64 bench_tf32_b64 torch_eager_b64"

# ---- every stage taking its expected time on an H200: all within the budget ------------
dry expected
[ $rc -eq 0 ] || fail "dry run on the expected times exited $rc"
has "$(line 1)" "gptx GPU check: PASSED, [0-9]* s of the 360 s budget" "line 1"

# ---- the plan, every stage 10 s: torch.compile gets the time left, and runs last ----------
DEPS=$tmp/deps dry plan "*=ok:10"
[ $rc -eq 0 ] || fail "plain dry run exited $rc"
[ "$(stages)" = "mma_nvcc test_mma_fragments configure build $tests $bench torch_compile_b64 " ] ||
    fail "stage order: $(stages)"
has "$(line 1)" "gptx GPU check: PASSED" "line 1"
grep -q 'ctest' "$plan" && fail "the plan runs ctest"
# the fragment test: nvcc on the one file, for the device's architecture, then the binary
has "$(step mma_nvcc)" "|timeout --kill-after=5 60 [^ ]*nvcc -O2 -std=c++17 -arch=sm_90 " "nvcc"
for w in "-I[^ ]*/include " "-I[^ ]*/backends/cuda " "-I[^ ]*/lib/core " "-I[^ ]*/backends/common " \
    "[^ ]*/tests/gpu/test_mma_fragments.cu -o [^ ]*/mma/test_mma_fragments"; do
    has "$(step mma_nvcc)" "$w" "nvcc"
done
has "$(step test_mma_fragments)" "|timeout --kill-after=5 30 [^ ]*/mma/test_mma_fragments$" \
    "fragment test runs directly"
cfg=$(step configure)
for w in "-G Ninja" "-DCMAKE_BUILD_TYPE=Release" "-DGPTX_CUDA=ON" "-DGPTX_CUDA_ARCHITECTURES=90" \
    "-DGPTX_CUDA_PTXAS_VERBOSE=ON" "-DGPTX_NCCL=ON" \
    "-DGPTX_NCCL_INCLUDE_DIR=[^ ]*/site-packages/nvidia/nccl/include" \
    "-DGPTX_NCCL_LIBRARY=[^ ]*/site-packages/nvidia/nccl/lib/libnccl.so.2" "-DGPTX_DNNL=ON" \
    "-DGPTX_DNNL_INCLUDE_DIR=/opt/gptx-deps/usr/include" \
    "-DGPTX_DNNL_LIBRARY=/opt/gptx-deps/usr/lib/x86_64-linux-gnu/libdnnl.so" \
    "-DGPTX_OPENMP_RUNTIME=/opt/gptx-deps/usr/lib/x86_64-linux-gnu/libgomp.so.1"; do
    has "$cfg" "$w" "configure"
done
has "$(line 7)" "^dependencies: NCCL [^ ]*/libnccl.so.2; oneDNN unpacked into /opt/gptx-deps (" "line 7"
has "$(line 7)" "libdnnl2.*libgomp1.*ocl-icd-libopencl1" "line 7"
has "$(step build)" "--target gptx_cuda $tests gptx-bench-gpu gptx-bench-attention gptx-op-profile -- -k 0" \
    "build targets"
for t in $tests; do
    l=$(step "$t")
    lim=$(cut -d'|' -f3 <<<"$l")
    { [ "$lim" -ge 60 ] && [ "$lim" -le 90 ]; } || fail "$t: limit $lim outside 60..90"
    has "$l" "|timeout --kill-after=5 $lim [^ ]*/tests/[a-z]*/$t\( \|$\)" "$t runs directly"
done
has "$(step test_nccl_single)" "/tests/comm/test_nccl_single$" "NCCL smoke"
has "$(step bench_attention)" "|45|.*/bench/gpu/gptx-bench-attention --batch 8 --heads 12 --seq 1024 --head-size 64 --warmup [0-9]* --iters [0-9]* --json " \
    "attention benchmark"
has "$(step racecheck_attention)" "|60|timeout --kill-after=5 60 compute-sanitizer --tool racecheck --error-exitcode 86 " \
    "racecheck"
has "$(step racecheck_attention)" "/gptx-bench-attention --batch 1 --heads 2 --seq 130 --head-size 64 --warmup 0 --iters 1$" \
    "racecheck shape"
has "$(step op_profile_bf16)" "|30|.*/bench/gptx-op-profile --backend cuda --config gpt2-124M --precision bf16 --warmup [0-9]* --steps [0-9]*$" \
    "op profile"
has "$(step bench_bf16_b64)" "--precision bf16 --batch 64 --warmup" "bf16 b64"
has "$(step bench_bf16_b64_graphs)" "--batch 64 --graphs 1" "graphs on"
has "$(step bench_bf16_largest)" "--max-batch 512" "largest batch"
has "$(step bench_fp32_b64)" "--precision fp32 --batch 64" "fp32"
has "$(step bench_tf32_b64)" "--precision tf32 --batch 64" "tf32"
has "$(step torch_eager_b64)" "torch_gpu_bench.py --batch 64 --no-compile" "eager"
# the groups add up to the budget: 6 minutes
groups=$(grep -o 'groups [0-9]* + [0-9]* + [0-9]* s' "$summary")
if [[ $groups =~ ([0-9]+)\ \+\ ([0-9]+)\ \+\ ([0-9]+) ]]; then
    sum=$((BASH_REMATCH[1] + BASH_REMATCH[2] + BASH_REMATCH[3]))
    [ "$sum" -le 360 ] || fail "groups add up to $sum s: $groups"
else
    fail "no group plan in the summary"
fi
n=$(find "$tmp/plan/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in OUT"

# ---- without build-gpu-deps/dnnl: oneDNN off, and the summary says why ----------------
dry nodnnl "*=ok:10"
has "$(step configure)" "-DGPTX_DNNL=OFF" "configure without oneDNN"
grep -q 'DNNL_LIBRARY' <<<"$(step configure)" && fail "oneDNN paths without the packages"
has "$(line 7)" "oneDNN none (not on the machine, no nodeps/dnnl/\*.deb carried)" "line 7"

# ---- the ptxas report keeps the attention kernels, the tensor-core ones too -------------
mkdir -p "$tmp/ptxas"
cat >"$tmp/ptxas/build.log" <<'EOF'
ptxas info    : Compiling entry function '_Z15k_flash_forwardILi64EEv16flash_fwd_params' for 'sm_90'
ptxas info    : Used 168 registers, used 1 barriers, 0 bytes smem
ptxas info    : Compiling entry function '_Z19k_attention_forwardIfEvPT_' for 'sm_90'
ptxas info    : Used 96 registers
ptxas info    : Compiling entry function '_Z11k_layernormIfEvPT_' for 'sm_90'
ptxas info    : Used 32 registers
EOF
report=$(OUT=$tmp/ptxas ARCH=90 bash -c "$(sed -n '/^ptxas_lines()/,/^}/p' "$here/run_all.sh"); ptxas_lines")
has "$report" "k_flash_forward" "ptxas report"
has "$report" "Used 168 registers" "ptxas report"
has "$report" "k_attention_forward" "ptxas report"
grep -q layernorm <<<"$report" && fail "ptxas report keeps other kernels: $report"

# ---- failing tests, a hung one, a racecheck hazard, a slow benchmark using up the budget -
dry broken "test_mma_fragments=fail:2,test_cuda_model=fail:20,test_cuda_graphs=timeout,\
racecheck_attention=exit86:10,bench_bf16_largest=ok:85,bench_fp32_b64=ok:40,*=ok:10"
[ $rc -eq 1 ] || fail "broken run exited $rc"
has "$(line 1)" "gptx GPU check: FAILED" "line 1"
has "$(line 2)" "^passed (16): mma_nvcc, configure, build, test_cuda_flash, test_cuda_kernels, test_reference_cuda" "line 2"
has "$(line 3)" "^failed (5): test_mma_fragments (exit 1), test_cuda_model (exit 1), test_cuda_graphs (timeout after 60 s)" "line 3"
has "$(line 3)" "racecheck_attention (exit 86: racecheck reported a hazard, see tests.log)" "line 3"
has "$(line 3)" "bench_fp32_b64 (timeout after 28 s)" "line 3"
has "$(line 5)" "^skipped (1): torch_compile_b64 (optional, needs 120 s" "line 5"
has "$(line 4)" "^not reached (2): bench_tf32_b64 (time budget" "line 4"
has "$(line 4)" "torch_eager_b64 (time budget" "line 4"
has "$(line 6)" "^CUDA bf16 vs CPU bf16 comparison: (dry run" "line 6"
# a failed fragment test stops nothing: configure and every test still run
[ "$(stages)" = "mma_nvcc test_mma_fragments configure build $tests ${bench% bench_tf32_b64 *} " ] ||
    fail "stage order after failures: $(stages)"
# the hung test took 60 s: the sampler, still last, gets what its group has left
[ "$(grep '^test_' "$plan" | tail -n 1 | cut -d'|' -f1)" = test_sampler_device ] ||
    fail "sampler not the last test"
lim=$(limit_of test_sampler_device)
[ "$lim" -lt 90 ] || fail "sampler limit $lim not cut to its group's time"
n=$(find "$tmp/broken/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in OUT"

# ---- nvcc cannot compile the fragment test: it is not run, the rest is ------------------
dry nvcc "mma_nvcc=fail,*=ok:10"
has "$(line 4)" "test_mma_fragments (nvcc failed: see build.log)" "line 4"
grep -q '^test_mma_fragments|' "$plan" && fail "fragment test run without its binary"
grep -q '^configure|' "$plan" || fail "no configure after nvcc failed"

# ---- no compute-sanitizer, or one that refuses the device: skipped, not failed ----------
SAN=/nonexistent/compute-sanitizer dry nosan "*=ok:10"
[ $rc -eq 0 ] || fail "run without compute-sanitizer exited $rc"
has "$(line 5)" "racecheck_attention (compute-sanitizer is not on this machine)" "line 5"
grep -q '^racecheck_attention|' "$plan" && fail "racecheck ran without the tool"
dry refused "racecheck_attention=nodevice,*=ok:10"
[ $rc -eq 0 ] || fail "run with a refusing compute-sanitizer exited $rc"
has "$(line 1)" "gptx GPU check: PASSED" "line 1"
has "$(line 5)" "racecheck_attention (compute-sanitizer refused the device: see tests.log)" "line 5"
grep -q '^op_profile_bf16|' "$plan" || fail "benchmarks stopped after a refusing sanitizer"

# ---- no device: every test exits 77 ----------------------------------------------------
dry nodevice "test_*=nodevice,*=ok:10"
[ $rc -eq 1 ] || fail "no-device run exited $rc"
has "$(line 1)" "gptx GPU check: NO DEVICE" "line 1"
has "$(line 5)" "test_mma_fragments (exit 77: no device), test_cuda_flash (exit 77: no device)" "line 5"
has "$(line 5)" "racecheck_attention (no device)" "line 5"
has "$(line 6)" "comparison: not run (test_cuda_model SKIPPED (exit 77: no device))" "line 6"
grep -q '^bench_\|^torch_\|^racecheck\|^op_profile' "$plan" && fail "benchmarks ran without a device"


if [ $failures -gt 0 ]; then
    echo "test_run_all_dry: $failures failure(s); summaries:"
    head -n 7 "$tmp"/*/out/summary.txt
    exit 1
fi
echo "test_run_all_dry: the plan and the summaries as expected"
head -n 7 "$tmp/broken/out/summary.txt"
