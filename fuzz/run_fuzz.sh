#!/bin/sh
# Fuzzes the gptx checkpoint and import loaders for a fixed time.
#
#   fuzz/run_fuzz.sh SECONDS [FUZZER] [WORKDIR]
#
# FUZZER defaults to build-fuzz/fuzz/gptx_fuzz_checkpoint (see fuzz/CMakeLists.txt).
# The corpus starts from tests/checkpoint/corpus (copied into WORKDIR/corpus,
# which the fuzzer extends; the repository is never written). Exit status 0:
# no crash, leak or sanitizer report. Otherwise the input is in
# WORKDIR/artifacts: copy it into tests/checkpoint/corpus/ (test_fuzz_corpus
# replays it) and fix the bug.
set -u
if [ $# -lt 1 ]; then
    echo "usage: $0 SECONDS [FUZZER] [WORKDIR]" >&2
    exit 2
fi
secs=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fuzzer=${2:-$root/build-fuzz/fuzz/gptx_fuzz_checkpoint}
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/gptx_fuzz.XXXXXX")}
if [ ! -x "$fuzzer" ]; then
    echo "no fuzzer at $fuzzer: build it with -DGPTX_FUZZ=ON (clang)" >&2
    exit 2
fi
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/tests/checkpoint/corpus/* "$work/corpus/" 2>/dev/null
rm -f "$work"/artifacts/*

echo "fuzzing for ${secs}s; corpus and artifacts in $work"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
"$fuzzer" -max_total_time="$secs" -max_len=16384 -timeout=20 -rss_limit_mb=2048 \
    -dict="$here/safetensors.dict" -artifact_prefix="$work/artifacts/" \
    -print_final_stats=1 "$work/corpus"
rc=$?
found=$(ls "$work/artifacts" 2>/dev/null | wc -l)
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "FUZZER FOUND A PROBLEM (exit $rc): inputs in $work/artifacts" >&2
    ls -l "$work/artifacts" >&2
    exit 1
fi
echo "no problem found in ${secs}s ($(ls "$work/corpus" | wc -l) corpus files)"
