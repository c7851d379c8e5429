#!/usr/bin/env bash
# tests/gpu/run_all.sh --dry-run on a simulated clock (no build, no device):
# the plan of the one GPU call (stage order, every test run directly under its
# own 60-90 s timeout, the sampler last, the benchmark order, torch.compile
# only with time left, the groups within the 360 s budget, at most 8 files
# back) and the summary's first lines for a failing, a timed-out, an
# unreached stage and a machine without a device.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# dry NAME [SIM]: runs the dry run into $tmp/NAME, sets rc
dry() {
    local dir=$tmp/$1
    GPTX_GPU_BUILD=$dir OUT=$dir/out GPTX_GPU_DRY_SIM=${2:-} GPTX_JOBS=16 \
        bash "$here/run_all.sh" --dry-run >"$dir.stdout" 2>&1
    rc=$?
    plan=$dir/dry-run-plan.txt
    summary=$dir/out/summary.txt
}
stages() { cut -d'|' -f1 "$plan" | tr '\n' ' '; }
line() { sed -n "$1p" "$summary"; }
has() { grep -q -e "$2" <<<"$1" || fail "$3: '$2' not in: $1"; }

tests="test_cuda_kernels test_cuda_model test_reference_cuda test_cuda_train test_cuda_pure"
tests+=" test_cuda_graphs test_cuda_timer test_sampler_device"
bench="bench_bf16_b64 bench_bf16_b64_graphs bench_bf16_b64_separate bench_bf16_largest"
bench+=" bench_fp32_b64 bench_tf32_b64 torch_eager_b64"

# ---- every stage taking its expected time on an H200: all within the budget ------------
dry expected
[ $rc -eq 0 ] || fail "dry run on the expected times exited $rc"
has "$(line 1)" "gptx GPU check: PASSED, [0-9]* s of the 360 s budget" "line 1"

# ---- the plan, every stage 10 s: torch.compile gets the time left, and runs last ----------
dry plan "*=ok:10"
[ $rc -eq 0 ] || fail "plain dry run exited $rc"
[ "$(stages)" = "configure build $tests $bench torch_compile_b64 " ] || fail "stage order: $(stages)"
has "$(line 1)" "gptx GPU check: PASSED" "line 1"
grep -q 'ctest' "$plan" && fail "the plan runs ctest"
cfg=$(grep '^configure|' "$plan")
for w in "-G Ninja" "-DCMAKE_BUILD_TYPE=Release" "-DGPTX_CUDA=ON" "-DGPTX_CUDA_ARCHITECTURES=90" \
    "-DGPTX_CUDA_PTXAS_VERBOSE=ON"; do
    has "$cfg" "$w" "configure"
done
has "$(grep '^build|' "$plan")" "--target gptx_cuda $tests gptx-bench-gpu -- -k 0" "build targets"
for t in $tests; do
    l=$(grep "^$t|" "$plan")
    lim=$(cut -d'|' -f3 <<<"$l")
    { [ "$lim" -ge 60 ] && [ "$lim" -le 90 ]; } || fail "$t: limit $lim outside 60..90"
    has "$l" "|timeout --kill-after=5 $lim [^ ]*/tests/gpu/$t\( \|$\)" "$t runs directly"
done
has "$(grep '^bench_bf16_b64|' "$plan")" "--precision bf16 --batch 64 --warmup" "bf16 b64"
has "$(grep '^bench_bf16_b64_graphs|' "$plan")" "--batch 64 --graphs 1" "graphs on"
has "$(grep '^bench_bf16_b64_separate|' "$plan")" "--batch 64 --fused 0" "forward then backward"
has "$(grep '^bench_bf16_largest|' "$plan")" "--max-batch 512" "largest batch"
has "$(grep '^bench_fp32_b64|' "$plan")" "--precision fp32 --batch 64" "fp32"
has "$(grep '^bench_tf32_b64|' "$plan")" "--precision tf32 --batch 64" "tf32"
has "$(grep '^torch_eager_b64|' "$plan")" "torch_gpu_bench.py --batch 64 --no-compile" "eager"
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

# ---- a failing test, a hung one, and a slow benchmark that uses up the budget -------
dry broken "test_cuda_model=fail:20,test_cuda_graphs=timeout,test_*=ok:20,bench_bf16_largest=ok:85,\
bench_fp32_b64=ok:40,*=ok:10"
[ $rc -eq 1 ] || fail "broken run exited $rc"
has "$(line 1)" "gptx GPU check: FAILED" "line 1"
has "$(line 2)" "^passed (12): configure, build, test_cuda_kernels, test_reference_cuda" "line 2"
has "$(line 3)" "^failed (3): test_cuda_model (exit 1), test_cuda_graphs (timeout after 60 s)" "line 3"
has "$(line 3)" "bench_fp32_b64 (timeout after 20 s)" "line 3"
has "$(line 5)" "^skipped (1): torch_compile_b64 (optional, needs 120 s" "line 5"
has "$(line 4)" "^not reached (2): bench_tf32_b64 (time budget" "line 4"
has "$(line 4)" "torch_eager_b64 (time budget" "line 4"
# the hung test took 60 s: the sampler, still last, gets what its group has left
[ "$(grep '^test_' "$plan" | tail -n 1 | cut -d'|' -f1)" = test_sampler_device ] ||
    fail "sampler not the last test"
lim=$(grep '^test_sampler_device|' "$plan" | cut -d'|' -f3)
[ "$lim" -lt 90 ] || fail "sampler limit $lim not cut to its group's time"
n=$(find "$tmp/broken/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in OUT"

# ---- no device: every test exits 77 ----------------------------------------------------
dry nodevice "test_*=nodevice,*=ok:10"
[ $rc -eq 1 ] || fail "no-device run exited $rc"
has "$(line 1)" "gptx GPU check: NO DEVICE" "line 1"
has "$(line 5)" "test_cuda_kernels (exit 77: no device)" "line 5"
grep -q '^bench_\|^torch_' "$plan" && fail "benchmarks ran without a device"


if [ $failures -gt 0 ]; then
    echo "test_run_all_dry: $failures failure(s); summaries:"
    head -n 5 "$tmp"/*/out/summary.txt
    exit 1
fi
echo "test_run_all_dry: the plan and the summaries as expected"
head -n 5 "$tmp/broken/out/summary.txt"
