#!/usr/bin/env bash
# gptx-tokenize's encoding throughput on one corpus at --threads 1 and 2
# (issue 26): the bundled texts (data/*.txt, 3 MB) repeated to SIZE_MB (50 by
# default) in one folder of files in /tmp, encoded into fixed-size shards,
# each run timed from start to exit (reading, encoding, writing the shards).
# Prints MB/s (10^6 input bytes a second) per thread count, the median of
# RUNS runs, and checks that the shards of every run are the same. Run it on
# a quiet machine; the figures go into docs/tokenizer.md ("gptx-tokenize's
# throughput").
#
#   bench/tokenizer/run_tokenize_bench.sh
#
# Environment: BUILD_DIR (default <repo>/build, must hold
# examples/gptx-tokenize), SIZE_MB (50), THREADS_LIST ("1 2"), RUNS (3),
# OUT_DIR (a new temp dir by default; the corpus and shards go there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$root/build}"
SIZE_MB="${SIZE_MB:-50}" THREADS_LIST="${THREADS_LIST:-1 2}" RUNS="${RUNS:-3}"
OUT_DIR="${OUT_DIR:-$(mktemp -d /tmp/gptx-tokenize-bench.XXXXXX)}"
tok="$BUILD_DIR/examples/gptx-tokenize"
[[ -x "$tok" ]] || { echo "run_tokenize_bench.sh: $tok not found; build $BUILD_DIR first" >&2; exit 1; }
mkdir -p "$OUT_DIR/corpus"

# the corpus: copies of the bundled texts, one file each, until SIZE_MB
want=$((SIZE_MB * 1000000)) have=0 i=0
while [ "$have" -lt "$want" ]; do
  for t in "$root"/data/*.txt; do
    [ "$have" -lt "$want" ] || break
    cp "$t" "$OUT_DIR/corpus/$(printf '%05d' $i)-$(basename "$t")"
    have=$((have + $(stat -c %s "$t"))) i=$((i + 1))
  done
done
echo "== corpus: $i files, $have bytes in $OUT_DIR/corpus"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) online CPUs"

ref=""
for t in $THREADS_LIST; do
  secs=()
  for r in $(seq 1 "$RUNS"); do
    rm -rf "$OUT_DIR/shards"
    t0=$(date +%s.%N)
    "$tok" --input "$OUT_DIR/corpus" --out-dir "$OUT_DIR/shards" --prefix bench \
      --shard-tokens 100000000 --threads "$t" > /dev/null
    t1=$(date +%s.%N)
    secs+=("$(echo "$t1 - $t0" | bc -l)")
    sum=$(cat "$OUT_DIR"/shards/*.bin | md5sum | cut -d' ' -f1)
    [ -z "$ref" ] && ref=$sum
    [ "$sum" = "$ref" ] || { echo "threads $t: other shards than the first run's" >&2; exit 1; }
  done
  med=$(printf '%s\n' "${secs[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p")
  printf 'threads %s: %.2f s (median of %s: %s) -> %.1f MB/s\n' "$t" "$med" "$RUNS" \
    "${secs[*]}" "$(echo "$have / 1000000 / $med" | bc -l)"
done
echo "== the shards of every run are the same (md5 $ref)"
