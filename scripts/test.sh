#!/usr/bin/env bash
# The project's test command (CI runs it through .ci/run):
#   1. normal build in build/ (RelWithDebInfo, warnings are errors, the tests
#      asked for: GPTX_BUILD_TESTS is off in a plain build), all tests;
#   2. ASan+UBSan build in build-asan/, tests labelled `unit`;
#   3. the libFuzzer targets built with clang in build-fuzz/ (nothing else),
#      each run for GPTX_FUZZ_SMOKE_SECONDS (15): a crash fails the run;
#   4. the CPU bf16 tests again in build-dnnl3/, built against oneDNN 3.x
#      (steps 1-2 use Debian's 2.6): PyPI's onednn-devel-cpu-gomp, pinned, in
#      a venv at build-dnnl3/venv that is kept between runs (the pip step is
#      skipped when it holds the pinned version).
# Exits non-zero as soon as a step fails. GPTX_JOBS sets the parallelism (2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${GPTX_JOBS:-2}

# In CI the ABI check must really run: missing abigail-tools or debug info
# fail it instead of skipping it.
export GPTX_ABI_CHECK_STRICT=${GPTX_ABI_CHECK_STRICT:-1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

step() { printf '\n##### %s\n' "$*"; }

step "configure build/"
cmake -S . -B build -DGPTX_WERROR=ON -DGPTX_BUILD_TESTS=ON
step "build build/"
cmake --build build -j"$jobs"
step "test build/"
ctest --test-dir build --output-on-failure -j"$jobs"

step "configure build-asan/"
# CUDA off: sanitizers do not see device code, and the CUDA runtime needs
# ASAN_OPTIONS=protect_shadow_gap=0 (tests/gpu runs the kernels' logic on the CPU instead)
cmake -S . -B build-asan -DGPTX_SANITIZE=ON -DGPTX_WERROR=ON -DGPTX_CUDA=OFF \
    -DGPTX_BUILD_TESTS=ON -DGPTX_BUILD_BENCH=OFF -DGPTX_BUILD_EXAMPLES=OFF
step "build build-asan/"
cmake --build build-asan -j"$jobs"
step "test build-asan/ (label unit)"
ctest --test-dir build-asan -L unit --output-on-failure -j"$jobs"

step "configure build-fuzz/ (clang, libFuzzer targets only)"
CC=clang cmake -S . -B build-fuzz -DGPTX_FUZZ=ON -DGPTX_WERROR=ON -DGPTX_CUDA=OFF \
    -DGPTX_BUILD_TESTS=OFF -DGPTX_BUILD_EXAMPLES=OFF -DGPTX_BUILD_BENCH=OFF
step "build build-fuzz/"
cmake --build build-fuzz -j"$jobs" --target gptx_fuzz_all
fuzz_secs=${GPTX_FUZZ_SMOKE_SECONDS:-15}
step "fuzz smoke: every target for ${fuzz_secs} s (fuzz/run_fuzz.sh)"
rm -rf build-fuzz/smoke
fuzz/run_fuzz.sh -b build-fuzz -w build-fuzz/smoke "$fuzz_secs"

# oneDNN 3.2.0 on GNU OpenMP, the runtime gptx needs (cmake/GptxDnnl.cmake);
# PyPI's plain onednn-devel is built on TBB and SYCL and is refused there
dnnl3_pin=2023.2.0
dnnl3_venv=build-dnnl3/venv
step "oneDNN 3 in ${dnnl3_venv} (onednn-devel-cpu-gomp==${dnnl3_pin})"
if [ -f "${dnnl3_venv}/.gptx-onednn-${dnnl3_pin}" ]; then
    echo "kept from an earlier run"
else
    rm -rf "$dnnl3_venv"
    python3 -m venv "$dnnl3_venv"
    "${dnnl3_venv}/bin/pip" install --quiet --disable-pip-version-check \
        "onednn-devel-cpu-gomp==${dnnl3_pin}"
    touch "${dnnl3_venv}/.gptx-onednn-${dnnl3_pin}"
fi
step "configure build-dnnl3/ (oneDNN 3, the bf16 tests only)"
cmake -S . -B build-dnnl3 -DGPTX_WERROR=ON -DGPTX_CUDA=OFF -DGPTX_DNNL=ON -DGPTX_BUILD_TESTS=ON \
    -DGPTX_DNNL_ROOT="$PWD/${dnnl3_venv}" -DGPTX_BUILD_EXAMPLES=OFF -DGPTX_BUILD_BENCH=OFF
step "build build-dnnl3/"
cmake --build build-dnnl3 -j"$jobs" --target test_cpu_bf16 test_cpu_precision \
    test_reference_cpu test_ckpt_precision test_cpu_attention_bf16 test_grad_fusion \
    test_thread_invariance test_reference
step "test build-dnnl3/ (the bf16 tests)"
ctest --test-dir build-dnnl3 --output-on-failure -j"$jobs" \
    -R '^(test_cpu_bf16|test_cpu_bf16_widened|test_cpu_dnnl_version|test_cpu_precision|reference_pytorch_cpu_bf16|reference_pytorch_cpu_bf16_pure|test_ckpt_precision|test_cpu_attention_bf16|test_cpu_attention_bf16_widened|test_grad_fusion|test_thread_invariance_onednn|reference_pytorch_onednn)$'
# the products really run on oneDNN 3 (the library found through the RPATH)
build-dnnl3/tests/cpu/test_cpu_bf16 --dnnl-version 3.

step "all tests passed"
