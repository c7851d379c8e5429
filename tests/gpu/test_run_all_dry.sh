#!/usr/bin/env bash
# The two device calls' scripts with --dry-run on a simulated clock (no build,
# no device): tests/gpu/run_all.sh (the final call) and
# tests/gpu/profile_call.sh (the profiling call before it).
#
# run_all.sh: the fragment test compiled alone and run before configure; the
# NCCL and oneDNN flags of the configure line; every test run directly under
# its own 60-90 s timeout, the tensor-core attention first, the NCCL smoke
# before the sampler, the sampler last; llm.c's build in the background from
# the tests on and its timing after gptx's batch-64 runs, before
# torch.compile, when build-peers/llmc is carried (a temporary folder here),
# skipped cleanly when not; the op profile at batch 64 and 8, the bandwidth
# benchmark; gptx-bench-gpu's repeat check on for bf16; the optional stages
# last; the groups within the 450 s budget, the expected run inside it, at
# most 8 files back; the ptxas filter; the summary's first lines for a
# failing, a timed-out, an unreached stage, a racecheck hazard, a fragment
# test that fails or cannot be compiled, a sanitizer that is missing or
# refuses the device, llm.c failing to build or slow to, and no device.
# profile_call.sh: only what it needs built, the benchmarks then ncu
# (--clock-control none) on the three kernel sets of a batch-8 step, ncu
# missing, no device, within its budget and 8 files. The lease: both calls'
# budgets, their timeouts' slack and one machine start within 15 minutes.
# bench_figures.py: the repeatability and peers lines from benchmark JSON,
# the ncu table from a report; llmc_peer.sh's timing from llm.c's lines.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# dry NAME [SIM]: runs run_all.sh's dry run into $tmp/NAME, sets rc. DEPS
# names the carried packages' folder (default: none), SAN the sanitizer
# program, LLMC llm.c's folder (default: none carried). SCRIPT another script.
mkdir -p "$tmp/nodeps" "$tmp/deps/dnnl" "$tmp/llmc/llmc" "$tmp/nollmc"
for p in libdnnl2_2.6.3-1 libdnnl-dev_2.6.3-1 ocl-icd-libopencl1_2.3.1-1 libgomp1_12.2.0-14; do
    : >"$tmp/deps/dnnl/${p}_amd64.deb"
done
: >"$tmp/llmc/train_gpt2.cu" # what llmc_carried looks for
dry() {
    local dir=$tmp/$1
    GPTX_GPU_BUILD=$dir OUT=$dir/out GPTX_GPU_DRY_SIM=${2:-} GPTX_JOBS=16 \
        GPTX_GPU_DEPS_DIR=${DEPS:-$tmp/nodeps} GPTX_GPU_SANITIZER=${SAN:-} \
        GPTX_GPU_LLMC_DIR=${LLMC:-$tmp/nollmc} GPTX_GPU_NCU=${NCU:-} \
        bash "$here/${SCRIPT:-run_all.sh}" --dry-run >"$dir.stdout" 2>&1
    rc=$?
    plan=$dir/dry-run-plan.txt
    summary=$dir/out/summary.txt
}
stages() { cut -d'|' -f1 "$plan" | tr '\n' ' '; }
line() { sed -n "$1p" "$summary"; }
has() { grep -q -e "$2" <<<"$1" || fail "$3: '$2' not in: $1"; }
step() { grep "^$1|" "$plan"; }           # the plan's line of stage $1
limit_of() { step "$1" | cut -d'|' -f3; } # its timeout
row() { grep "^$1 " "$summary"; }         # its row in the summary's table
files_back() { # DIR: at most 8 files in OUT
    local n
    n=$(find "$1/out" -type f | wc -l)
    [ "$n" -le 8 ] || fail "$n files in $1/out"
}
groups_within() { # BUDGET: the plan line's groups add up to at most BUDGET
    local groups sum=0 g
    groups=$(grep -o 'groups [0-9 +]* s' "$summary")
    [ -n "$groups" ] || { fail "no group plan in the summary"; return; }
    while read -r g; do sum=$((sum + g)); done < <(grep -o '[0-9][0-9]*' <<<"$groups")
    [ "$sum" -le "$1" ] || fail "groups add up to $sum s: $groups"
}

tests="test_cuda_flash test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train"
tests+=" test_cuda_pure test_cuda_graphs test_cuda_timer test_nccl_single test_sampler_device"
bench="bench_attention bench_bf16_b64 bench_bf16_b64_graphs torch_compile_b64 op_profile_b64"
bench+=" bench_bandwidth op_profile_b8 racecheck_attention bench_tf32_b64 bench_fp32_b64"
bench+=" torch_eager_b64"
bench_llmc="bench_attention bench_bf16_b64 bench_bf16_b64_graphs llmc_cudnn torch_compile_b64"
bench_llmc+=" op_profile_b64 bench_bandwidth op_profile_b8 racecheck_attention bench_tf32_b64"
bench_llmc+=" bench_fp32_b64 torch_eager_b64 llmc_own"

# ---- every stage taking its expected time on an H200, llm.c carried -----------------------
LLMC=$tmp/llmc dry expected
[ $rc -eq 0 ] || fail "dry run on the expected times exited $rc"
has "$(line 1)" "gptx GPU check: PASSED, [0-9]* s of the 450 s budget" "line 1"
secs=$(line 1 | sed -n 's/.*PASSED, \([0-9]*\) s of.*/\1/p')
[ "${secs:-999}" -le 430 ] || fail "the expected run takes ${secs:-?} s: no 20 s margin in 450"
# every required stage ran; of the optional ones, what the time allowed
for s in mma_nvcc configure build llmc_build $tests $bench_llmc; do
    case $(row "$s") in *PASSED*) ;; *) fail "expected run: $s not PASSED: $(row "$s")" ;; esac
done
has "$(row bench_bf16_largest)" "SKIPPED (optional, needs 45 s" "largest batch optional"
has "$(line 7)" "; llm.c from build-peers/llmc (binaries in expected/llmc)$" "line 7"
has "$(line 8)" "^bitwise repeatable: not checked" "line 8"
has "$(line 9)" "^B 64 bf16, tokens/s, same call: not measured" "line 9"
files_back "$tmp/expected"

# ---- the plan, every stage 10 s -----------------------------------------------------------
DEPS=$tmp/deps dry plan "*=ok:10"
[ $rc -eq 0 ] || fail "plain dry run exited $rc"
[ "$(stages)" = "mma_nvcc test_mma_fragments configure build $tests $bench bench_bf16_largest " ] ||
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
has "$(step build)" "--target gptx_cuda $tests gptx-bench-gpu gptx-bench-attention gptx-op-profile gptx-bench-bandwidth -- -k 0" \
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
# the op profile is the benchmark's own batch (64), and the issue's 8 again
has "$(step op_profile_b64)" "|60|.*/bench/gptx-op-profile --backend cuda --config gpt2-124M --precision bf16 --batch 64 --warmup [0-9]* --steps [0-9]*$" \
    "op profile B 64"
has "$(step op_profile_b8)" "|30|.*/bench/gptx-op-profile --backend cuda --config gpt2-124M --precision bf16 --batch 8 " \
    "op profile B 8"
has "$(step bench_bandwidth)" "/bench/gpu/gptx-bench-bandwidth --batches 8,64 --json " "bandwidth"
# bf16 at batch 64 checks repeatability (--repeat is on unless 0); the others save the time
for s in bench_bf16_b64 bench_bf16_b64_graphs; do
    grep -q -- '--repeat 0' <<<"$(step $s)" && fail "$s: repeat check off"
done
has "$(step bench_bf16_b64)" "--precision bf16 --batch 64 --warmup" "bf16 b64"
has "$(step bench_bf16_b64_graphs)" "--batch 64 --graphs 1" "graphs on"
has "$(step bench_bf16_largest)" "--max-batch 512 .*--repeat 0" "largest batch"
has "$(step bench_fp32_b64)" "--precision fp32 --batch 64 .*--repeat 0" "fp32"
has "$(step bench_tf32_b64)" "--precision tf32 --batch 64 .*--repeat 0" "tf32"
has "$(step torch_eager_b64)" "torch_gpu_bench.py --batch 64 --no-compile" "eager"
# torch.compile at its best: compiled (no --no-compile), under its own 180 s
has "$(step torch_compile_b64)" "|180|timeout --kill-after=5 180 python3 bench/gpu/torch_gpu_bench.py --batch 64 --warmup" \
    "torch.compile"
grep -q -- '--no-compile' <<<"$(step torch_compile_b64)" && fail "torch.compile run without compile"
# without build-peers/llmc: llm.c's stages skipped, nothing of it planned, still PASSED
has "$(line 5)" "llmc_build (build-peers/llmc not carried: ../shared/tools/llmc-gpu/prepare.sh makes it), llmc_cudnn (build-peers/llmc not carried), llmc_own (build-peers/llmc not carried)" \
    "line 5 without llm.c"
grep -q 'llmc' "$plan" && fail "llm.c planned without its folder"
has "$(line 7)" "; llm.c not carried (no build-peers/llmc)$" "line 7"
groups_within 450
files_back "$tmp/plan"

# ---- llm.c carried: built in the background from the end of the build, timed after gptx ----
LLMC=$tmp/llmc dry llmc "*=ok:10"
[ $rc -eq 0 ] || fail "llm.c dry run exited $rc"
[ "$(stages)" = "mma_nvcc test_mma_fragments configure build llmc_build $tests $bench_llmc bench_bf16_largest " ] ||
    fail "stage order with llm.c: $(stages)"
has "$(step llmc_build)" "|tests|240|timeout --kill-after=5 240 bash [^ ]*/tests/gpu/llmc_peer.sh build $tmp/llmc $tmp/llmc/llmc (background)$" \
    "llm.c build"
has "$(step llmc_cudnn)" "|60|.*llmc_peer.sh time $tmp/llmc $tmp/llmc/llmc cudnn 20 --json $tmp/llmc/json/llmc_cudnn.json$" \
    "llm.c timing"
has "$(step llmc_own)" "llmc_peer.sh time .* own 12 --json " "llm.c own attention"
# a build slower than the tests: llm.c's timing waits for it, the clock with it
LLMC=$tmp/llmc dry llmcslow "llmc_build=ok:200,*=ok:10"
has "$(row llmc_build)" " 200  PASSED" "slow llm.c build"
start=$(grep -o 'at [0-9]* s' <<<"$(grep '^===== llmc_cudnn (limit' "$tmp/llmcslow/out/peers.log")")
has "$start" "at 24[0-9] s" "llm.c timed after its build (built from 40 s, 200 s)"
# a build that fails: its timing NOT REACHED, the rest runs; the call FAILED
LLMC=$tmp/llmc dry llmcfail "llmc_build=fail:30,*=ok:10"
[ $rc -eq 1 ] || fail "llm.c build failure exited $rc"
has "$(line 3)" "llmc_build (exit 1)" "line 3"
has "$(line 4)" "llmc_cudnn (llm.c did not build: see peers.log), llmc_own (llm.c did not build" "line 4"
grep -q '^torch_compile_b64|' "$plan" || fail "torch.compile not run after llm.c's failure"

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
report=$(OUT=$tmp/ptxas ARCH=90 bash -c "$(sed -n '/^ptxas_lines()/,/^}/p' "$here/gpu_stages.sh"); ptxas_lines 'attention|flash'")
has "$report" "k_flash_forward" "ptxas report"
has "$report" "Used 168 registers" "ptxas report"
has "$report" "k_attention_forward" "ptxas report"
grep -q layernorm <<<"$report" && fail "ptxas report keeps other kernels: $report"

# ---- without build-gpu-deps/dnnl: oneDNN off, and the summary says why ----------------
dry nodnnl "*=ok:10"
has "$(step configure)" "-DGPTX_DNNL=OFF" "configure without oneDNN"
grep -q 'DNNL_LIBRARY' <<<"$(step configure)" && fail "oneDNN paths without the packages"
has "$(line 7)" "oneDNN none (not on the machine, no nodeps/dnnl/\*.deb carried)" "line 7"

# ---- failing tests, a hung one, a racecheck hazard, a slow benchmark using up the budget -
dry broken "test_mma_fragments=fail:2,test_cuda_model=fail:20,test_cuda_graphs=timeout,\
racecheck_attention=exit86:10,torch_compile_b64=ok:150,bench_fp32_b64=ok:40,*=ok:10"
[ $rc -eq 1 ] || fail "broken run exited $rc"
has "$(line 1)" "gptx GPU check: FAILED" "line 1"
has "$(line 2)" "^passed (19): mma_nvcc, configure, build, test_cuda_flash, test_cuda_kernels, test_reference_cuda" "line 2"
has "$(line 3)" "^failed (5): test_mma_fragments (exit 1), test_cuda_model (exit 1), test_cuda_graphs (timeout after 60 s)" "line 3"
has "$(line 3)" "racecheck_attention (exit 86: racecheck reported a hazard, see tests.log)" "line 3"
has "$(line 3)" "bench_fp32_b64 (timeout after 23 s)" "line 3"
has "$(line 5)" "torch_eager_b64 (optional, needs 37 s: 5 s left), llmc_own (build-peers/llmc not carried), bench_bf16_largest (optional, needs 45 s: 5 s left)" \
    "line 5"
has "$(line 6)" "^CUDA bf16 vs CPU bf16 comparison: (dry run" "line 6"
# a failed fragment test stops nothing: configure and every test still run
[ "$(stages)" = "mma_nvcc test_mma_fragments configure build $tests ${bench% torch_eager_b64} " ] ||
    fail "stage order after failures: $(stages)"
# the hung test took 60 s: the sampler, still last, gets what its group has left
[ "$(grep '^test_' "$plan" | tail -n 1 | cut -d'|' -f1)" = test_sampler_device ] ||
    fail "sampler not the last test"
lim=$(limit_of test_sampler_device)
[ "$lim" -lt 90 ] || fail "sampler limit $lim not cut to its group's time"
files_back "$tmp/broken"

# ---- a stage past the budget: NOT REACHED, the call INCOMPLETE ----------------------------
dry late "torch_compile_b64=ok:170,bench_bandwidth=ok:57,*=ok:10"
has "$(line 1)" "gptx GPU check: INCOMPLETE" "line 1"
has "$(line 4)" "^not reached ([0-9]*): .*bench_fp32_b64 (time budget" "line 4"

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
grep -q '^bench_tf32_b64|' "$plan" || fail "benchmarks stopped after a refusing sanitizer"

# ---- no device: every test exits 77 (llm.c still builds: it needs no GPU) ----------------
LLMC=$tmp/llmc dry nodevice "test_*=nodevice,*=ok:10"
[ $rc -eq 1 ] || fail "no-device run exited $rc"
has "$(line 1)" "gptx GPU check: NO DEVICE" "line 1"
has "$(line 5)" "test_mma_fragments (exit 77: no device), test_cuda_flash (exit 77: no device)" "line 5"
has "$(line 5)" "racecheck_attention (no device)" "line 5"
has "$(line 5)" "llmc_cudnn (no device)" "line 5"
has "$(line 6)" "comparison: not run (test_cuda_model SKIPPED (exit 77: no device))" "line 6"
has "$(row llmc_build)" "PASSED" "llm.c built without a device"
grep -q '^bench_\|^torch_\|^racecheck\|^op_profile\|^llmc_cudnn\|^llmc_own' "$plan" &&
    fail "benchmarks ran without a device"

# ---- the profiling call -------------------------------------------------------------------
SCRIPT=profile_call.sh LLMC=$tmp/llmc dry profile
[ $rc -eq 0 ] || fail "profiling call's dry run exited $rc"
has "$(line 1)" "gptx GPU profile: PASSED, [0-9]* s of the 210 s budget" "profile line 1"
pstages="configure build llmc_build bench_bandwidth op_profile_b8 op_profile_b64 bench_attention"
pstages+=" ncu_colsum ncu_attention ncu_gemm"
[ "$(stages)" = "$pstages " ] || fail "profiling call's stage order: $(stages)"
has "$(step configure)" "$(cut -d'|' -f4 <<<"$cfg" | sed 's/.*-B [^ ]* //; s/-DGPTX_DNNL=ON.*//')" \
    "configured as the final call"
has "$(step build)" "--target gptx_cuda gptx-bench-bandwidth gptx-op-profile gptx-bench-gpu gptx-bench-attention -- -k 0$" \
    "profiling call builds only its programs"
has "$(step llmc_build)" "llmc_peer.sh build $tmp/llmc $tmp/profile/llmc (background)$" "profile llm.c"
has "$(step op_profile_b8)" "--batch 8 --warmup" "profile B 8"
has "$(step op_profile_b64)" "--batch 64 --warmup" "profile B 64"
has "$(step bench_bandwidth)" "--batches 8,64" "profile bandwidth"
has "$(step bench_attention)" "--head-size 64 --warmup 3 --iters 20 --variant all --json " \
    "profile: every tile configuration of the attention"
for s in ncu_colsum ncu_attention ncu_gemm; do
    has "$(step $s)" "|timeout --kill-after=5 60 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy " \
        "$s"
    has "$(step $s)" " [^ ]*/bench/gpu/gptx-bench-gpu --precision bf16 --batch 8 --warmup 1 --steps 1 --repeat 0$" \
        "$s's step"
done
has "$(step ncu_colsum)" "--section MemoryWorkloadAnalysis -k regex:colsum|column|layernorm_backward|bias_grad -s 0 -c 16 " \
    "ncu column sums"
has "$(step ncu_attention)" "-k regex:flash|attention -s 11 -c 4 " "ncu attention"
has "$(step ncu_gemm)" "-k regex:gemm|nvjet|xmma|cutlass|splitK -s 44 -c 16 " "ncu cuBLASLt"
groups_within 210
files_back "$tmp/profile"
back=$(cd "$tmp/profile/out" && find . -type f | sort | tr '\n' ' ')
[ "$back" = "./bench.log ./build.log ./ncu.log ./nvidia-smi.txt ./profile.log ./summary.txt " ] ||
    fail "profiling call's files (a dry run writes no bench.json): $back"
# the kernel sets are renamed by the environment, not by editing the script
SCRIPT=profile_call.sh GPTX_NCU_GEMM_RE=nvjet GPTX_NCU_GEMM_SKIP=3 GPTX_NCU_GEMM_COUNT=5 dry profenv
has "$(step ncu_gemm)" "-k regex:nvjet -s 3 -c 5 " "ncu regex from the environment"
# no ncu: its stages skipped, the call PASSED
SCRIPT=profile_call.sh NCU=/nonexistent/ncu dry noncu "*=ok:10"
[ $rc -eq 0 ] || fail "profiling call without ncu exited $rc"
has "$(line 5)" "ncu_colsum (ncu is not on this machine), ncu_attention (ncu is not on this machine)" \
    "profile line 5"
grep -q '^ncu_' "$plan" && fail "ncu ran without the tool"
# no device: the first device stage exits 77, nothing else runs on it
SCRIPT=profile_call.sh dry profnodev "bench_bandwidth=nodevice,*=ok:10"
has "$(line 1)" "gptx GPU profile: NO DEVICE" "profile line 1"
grep -q '^op_profile\|^ncu_\|^bench_attention' "$plan" && fail "profiling without a device"
# a slow build leaves the rest of the call its time, never more than the budget
SCRIPT=profile_call.sh dry profslow "build=ok:85,*=ok:30"
has "$(line 4)" "ncu_gemm (time budget" "slow build: the last ncu stage not reached"

# ---- the lease: profiling call, final call, their slack and a machine start in 15 min ----
rb=$(sed -n 's/^call_setup tests\/gpu\/run_all.sh \([0-9]*\) .*/\1/p' "$here/run_all.sh")
pb=$(sed -n 's/^call_setup tests\/gpu\/profile_call.sh \([0-9]*\) .*/\1/p' "$here/profile_call.sh")
if [ -z "$rb" ] || [ -z "$pb" ]; then fail "no budget found in the scripts' call_setup lines"; fi
[ $((rb + pb + 2 * 60 + 120)) -le 900 ] ||
    fail "budgets $rb + $pb s, 60 s of timeout slack each and a 120 s start exceed 900 s"

# ---- the summary's figures from benchmark JSON -------------------------------------------
fig=$here/bench_figures.py
mkdir -p "$tmp/json"
gx='"implementation": "gptx", "batch": 64, "mfu": 0.36, "step_median_s": 0.146, "cold_step_s": 2'
echo "{$gx, \"tokens_per_s\": 445000, \"graphs\": 0, \"bitwise_repeatable\": true}" >"$tmp/json/bench_bf16_b64.json"
echo "{$gx, \"tokens_per_s\": 450000, \"graphs\": 1, \"bitwise_repeatable\": true}" >"$tmp/json/bench_bf16_b64_graphs.json"
echo '{"implementation": "pytorch", "tokens_per_s": 477000}' >"$tmp/json/torch_compile_b64.json"
echo '{"implementation": "llm.c", "tokens_per_s": 515000}' >"$tmp/json/llmc_cudnn.json"
out=$(python3 "$fig" peers "$tmp/json")
has "$out" "^bitwise repeatable: yes (bench_bf16_b64, bench_bf16_b64_graphs: " "repeatable line"
has "$out" "^B 64 bf16, tokens/s, same call: gptx 450000 (graphs on, MFU 36.0 %, goal 50 %); torch.compile 477000: gptx 0.94x (goal 1.3x); llm.c cuDNN 515000: gptx 0.87x (goal 1.2x)$" \
    "peers line"
echo "{$gx, \"tokens_per_s\": 300000, \"graphs\": 0, \"bitwise_repeatable\": false}" >"$tmp/json/bench_fp32_b64.json"
has "$(python3 "$fig" peers "$tmp/json")" "^bitwise repeatable: NO (bench_fp32_b64)$" "a run that did not repeat"
has "$(python3 "$fig" figure "$tmp/json/bench_bf16_b64.json")" "^batch 64: 445000 tok/s, MFU 36.0 %.*; bitwise repeatable: yes$" \
    "gptx figure"

# ---- llm.c's step lines into its JSON (a stand-in for the binary) -------------------------
mkdir -p "$tmp/llmcbin"
cat >"$tmp/llmcbin/train_gpt2cu_cudnn" <<'EOF'
#!/bin/sh
i=1
while [ $i -le 8 ]; do
    printf 'step %4d/8 | loss 11.0 (+0.00z)| norm 1.0 (+0.00z)| lr 0.00e+00 | %d.00 ms | 40.0%% bf16 MFU | %d tok/s\n' $i $((120 + i)) $((500000 + i))
    i=$((i + 1))
done
EOF
chmod +x "$tmp/llmcbin/train_gpt2cu_cudnn"
bash "$here/llmc_peer.sh" time "$tmp/llmc" "$tmp/llmcbin" cudnn 8 --json "$tmp/llmc.json" >/dev/null ||
    fail "llmc_peer.sh time failed on llm.c's lines"
# steps 6..8: 126, 127, 128 ms: 65536 tokens / 127 ms
has "$(python3 "$fig" figure "$tmp/llmc.json" 2>&1)" "^llm.c (cudnn attention) batch 64: 516032 tok/s, 127.0 ms/step (mean of 3 steps)$" \
    "llm.c figure"

# ---- Nsight Compute's details page into the summary's table -------------------------------
cat >"$tmp/ncu.txt" <<'EOF'
==PROF== Profiling "k_colsum_partial": 0%....50%....100% - 9 passes
[4242] gptx-bench-gpu@127.0.0.1
  void k_colsum_partial<__nv_bfloat16, float>(float *, float *, const T1 *, const T2 *, const float *, const float *, int, int, bool) (32, 1, 1)x(256, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    DRAM Throughput                   %        10.23
    Duration                    usecond       106.14
    Compute (SM) Throughput           %         1.37
    Section: Launch Statistics
    Registers Per Thread             register/thread              40
    Section: Occupancy
    Achieved Occupancy                        %        11.72
  k_flash_forward (16, 96, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Duration                         ms         1.05
EOF
out=$(python3 "$fig" ncu "$tmp/ncu.txt")
has "$out" "^k_colsum_partial  *32x1x1  *256x1x1  *106.1  *10.2  *-  *1.4  *40  *11.7$" "ncu table"
has "$out" "^k_flash_forward  *16x96x1  *128x1x1  *1050.0 " "ncu table, ms"

if [ $failures -gt 0 ]; then
    echo "test_run_all_dry: $failures failure(s); summaries:"
    head -n 9 "$tmp"/*/out/summary.txt
    exit 1
fi
echo "test_run_all_dry: the plans and the summaries as expected"
head -n 9 "$tmp/broken/out/summary.txt"
