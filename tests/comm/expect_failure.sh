#!/usr/bin/env bash
# expect_failure.sh BOUND PATTERN command...
# Runs the command (an mpirun job in which a rank dies or hangs) under
# `timeout 60` and passes when it exits non-zero, not by the timeout, within
# BOUND seconds, with PATTERN in its output.
set -uo pipefail
bound=$1 pattern=$2
shift 2
start=$(date +%s%N)
out=$(timeout 60 "$@" 2>&1)
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
elapsed=$((ms / 1000)).$(printf '%03d' $((ms % 1000)))
echo "$out" | tail -n 30
echo "exit code $rc after ${elapsed} s (bound ${bound} s)"
if [ "$rc" -eq 0 ]; then echo "FAIL: the job should have failed"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung until timeout 60 killed it"; exit 1; fi
if [ "$ms" -gt $((bound * 1000)) ]; then echo "FAIL: took longer than $bound s"; exit 1; fi
if ! grep -q -- "$pattern" <<<"$out"; then echo "FAIL: output lacks '$pattern'"; exit 1; fi
echo "expect_failure: ok"
