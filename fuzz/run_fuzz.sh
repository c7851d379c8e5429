#!/bin/sh
# Runs fuzz targets one after the other, each for a fixed time.
#
#   fuzz/run_fuzz.sh [-b BUILD_DIR] [-w WORKDIR] SECONDS [TARGET...]
#
# TARGET: checkpoint tok_files tok_roundtrip shard hf_config train_options
# (default: all), built as BUILD_DIR/fuzz/gptx_fuzz_TARGET (BUILD_DIR defaults
# to build-fuzz; see fuzz/CMakeLists.txt). Each target's corpus starts from
# its folder in the repository (copied into WORKDIR/TARGET/corpus, which the
# fuzzer extends; the repository is never written), with fuzz/TARGET.dict.
# Prints one line of figures per target (libFuzzer's final stats). Exit
# status 0: no crash, leak, timeout or sanitizer report. Otherwise the input
# is in WORKDIR/TARGET/artifacts: copy it into the target's corpus folder
# (its replay test, test_fuzz_corpus or test_fuzz_TARGET, replays it) and fix
# the bug; the full log is WORKDIR/TARGET/log.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=$root/build-fuzz
work=
while getopts b:w: opt; do
    case $opt in
    b) build=$OPTARG ;;
    w) work=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
    echo "usage: $0 [-b BUILD_DIR] [-w WORKDIR] SECONDS [TARGET...]" >&2
    exit 2
fi
secs=$1
shift
[ $# -gt 0 ] || set -- checkpoint tok_files tok_roundtrip shard hf_config train_options
[ -n "$work" ] || work=$(mktemp -d "${TMPDIR:-/tmp}/gptx_fuzz.XXXXXX")

# corpus folder, longest input, extra libFuzzer flags: per target
# (-close_fd_mask=3 silences a target's own messages; sanitizer reports stay)
settings() {
    case $1 in
    checkpoint) echo "tests/io/corpus 16384" ;;
    tok_files) echo "tests/text/corpus_files 8192" ;;
    tok_roundtrip) echo "tests/text/corpus_roundtrip 4096" ;;
    shard) echo "tests/data/corpus 8192" ;;
    hf_config) echo "tests/io/corpus_hf_config 2048 -close_fd_mask=3" ;;
    train_options) echo "tests/examples/corpus_train_options 1024 -close_fd_mask=3" ;;
    *) return 1 ;;
    esac
}

final_stat() { sed -n "s/^stat::$1:[[:space:]]*//p" "$dir/log" | tail -n 1; }
done_field() { echo "$done_line" | sed -n "s/.* $1: \([^ ]*\).*/\1/p"; }

status=0
printf '%-14s %6s %10s %8s %6s %7s %7s %s\n' target secs execs exec/s cov ft corpus result
for t in "$@"; do
    s=$(settings "$t") || { echo "unknown target $t" >&2; exit 2; }
    set -- $s
    corpus=$1 maxlen=$2
    shift 2
    fuzzer=$build/fuzz/gptx_fuzz_$t
    if [ ! -x "$fuzzer" ]; then
        echo "no fuzzer at $fuzzer: build it with -DGPTX_FUZZ=ON (clang)" >&2
        exit 2
    fi
    dir=$work/$t
    mkdir -p "$dir/corpus" "$dir/artifacts"
    cp "$root/$corpus"/* "$dir/corpus/" 2>/dev/null
    rm -f "$dir"/artifacts/*
    dict=
    [ -f "$here/$t.dict" ] && dict=-dict=$here/$t.dict
    # the caller's options come last and win
    ASAN_OPTIONS=detect_leaks=1:${ASAN_OPTIONS:-} \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-} \
    "$fuzzer" -max_total_time="$secs" -max_len="$maxlen" -timeout=20 -rss_limit_mb=2048 \
        $dict "$@" -artifact_prefix="$dir/artifacts/" -print_final_stats=1 "$dir/corpus" \
        >"$dir/log" 2>&1
    rc=$?
    found=$(ls "$dir/artifacts" | wc -l)
    result=ok
    if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
        result="PROBLEM (exit $rc, $found input(s) in $dir/artifacts)"
        status=1
    fi
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$dir/log" | tail -n 1)
    printf '%-14s %6s %10s %8s %6s %7s %7s %s\n' "$t" "$secs" "$(final_stat number_of_executed_units)" \
        "$(final_stat average_exec_per_sec)" "$(done_field cov)" "$(done_field ft)" "$(ls "$dir/corpus" | wc -l)" \
        "$result"
    if [ "$result" != ok ]; then
        echo "---- last lines of $dir/log" >&2
        tail -n 40 "$dir/log" >&2
    fi
done
echo "work folder: $work"
if [ "$status" -ne 0 ]; then
    echo "FUZZER FOUND A PROBLEM: see above" >&2
fi
exit $status
