#!/usr/bin/env bash
# The project's test command (CI runs it through .ci/run):
#   1. normal build in build/ (RelWithDebInfo, warnings are errors), all tests;
#   2. ASan+UBSan build in build-asan/, tests labelled `unit`;
#   3. the libFuzzer targets built with clang in build-fuzz/ (nothing else),
#      each run for GPTX_FUZZ_SMOKE_SECONDS (15): a crash fails the run.
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
cmake -S . -B build -DGPTX_WERROR=ON
step "build build/"
cmake --build build -j"$jobs"
step "test build/"
ctest --test-dir build --output-on-failure -j"$jobs"

step "configure build-asan/"
# CUDA off: sanitizers do not see device code, and the CUDA runtime needs
# ASAN_OPTIONS=protect_shadow_gap=0 (tests/gpu runs the kernels' logic on the CPU instead)
cmake -S . -B build-asan -DGPTX_SANITIZE=ON -DGPTX_WERROR=ON -DGPTX_CUDA=OFF \
    -DGPTX_BUILD_BENCH=OFF -DGPTX_BUILD_EXAMPLES=OFF
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

step "all tests passed"
