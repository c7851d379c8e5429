#!/usr/bin/env bash
# Out of memory ends every program within seconds, with a message that says
# so and a non-zero status, whatever OpenBLAS's threading: each program runs
# under an address-space limit (ulimit -v) with OpenBLAS's worker threads
# (its default) and without them (OPENBLAS_NUM_THREADS=1), under a timeout
# that fails a hang. Before the fix every one of them hung after its message
# (OpenBLAS retries a failed 128 MiB work buffer forever: in its workers,
# which exit() then joins, or in the first cblas_sgemm).
set -uo pipefail
bin=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
"$bin/gptx-train" --preset micro --steps 1 --sample-tokens 0 --threads 2 --out-dir run \
  > train.log 2>&1 || { cat train.log; exit 1; }
model=run/model.safetensors

# KiB: enough to load each program (under 100 MiB here) but not for two
# threads' OpenBLAS buffers; gptx-tokenize asks for a 2 GiB read buffer
limit=200000
failures=0
run_limited() { # blas (default | 1), then the command
  local blas=$1
  shift
  (
    ulimit -v "$limit"
    if [ "$blas" = 1 ]; then export OPENBLAS_NUM_THREADS=1; else unset OPENBLAS_NUM_THREADS; fi
    exec timeout -k 2 20 "$@"
  ) > out.txt 2>&1
}

expect_oom() { # name, then the command
  local name=$1
  shift
  for blas in default 1; do
    local t0 rc secs
    t0=$(date +%s%N)
    run_limited "$blas" "$@"
    rc=$?
    secs=$(( ($(date +%s%N) - t0) / 1000000 ))
    local what="$name (OpenBLAS threads: $blas, ulimit -v $limit): exit $rc after $secs ms"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "FAIL $what: hung (killed by the 20 s timeout)"
    elif [ "$rc" = 127 ]; then
      echo "FAIL $what: could not even load (the limit is too low for this machine)"
    elif [ "$rc" = 0 ]; then
      echo "FAIL $what: succeeded under the limit (the limit is too high for this machine)"
    elif ! grep -qi "memory" out.txt; then
      echo "FAIL $what: no message about memory"
    else
      echo "ok   $what: $(grep -i memory out.txt | tail -1)"
      continue
    fi
    tail -5 out.txt | awk '{ print "     | " $0 }'
    failures=$((failures + 1))
  done
}

expect_oom gptx-train "$bin/gptx-train" --preset micro --steps 2 --threads 2 --out-dir limited
expect_oom gptx-generate "$bin/gptx-generate" --model "$model" --max-tokens 4 --threads 2
expect_oom gptx-eval "$bin/gptx-eval" --model "$model" --text "$data/the-verdict.txt" --threads 2
expect_oom gptx-tokenize "$bin/gptx-tokenize" --input "$data/the-verdict.txt" --out-dir tok \
  --chunk-bytes 1073741824
[ "$failures" = 0 ] || { echo "$failures failures"; exit 1; }
echo "every program ended with a message about memory"
