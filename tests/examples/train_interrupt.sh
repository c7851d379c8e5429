#!/usr/bin/env bash
# Ctrl-C during gptx-train: the run stops after the step in progress and
# still writes what a finished run writes (checkpoint, model, plot, metrics),
# exits with 130, and the checkpoint resumes from the step it stopped at.
set -euo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$train" --steps 100000 --eval-every 0 --sample-tokens 8 --threads 2 --out-dir run > run.log 2>&1 &
pid=$!
for _ in $(seq 600); do # wait for 3 finished steps (at most 60 s)
  [ "$(grep -c '"type": "train"' run/metrics.jsonl 2>/dev/null || true)" -ge 3 ] && break
  sleep 0.1
done
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" -eq 130 ] || { echo "exit status $rc after SIGINT, expected 130"; cat run.log; exit 1; }
grep -q 'interrupted: validating, writing the checkpoint' run.log
for f in run/latest run/model.safetensors run/loss.svg; do
  [ -s "$f" ] || { echo "no $f after the interrupt"; cat run.log; exit 1; }
done
if grep -q 'sample:' run.log; then echo "sampled after the interrupt"; exit 1; fi
at=$(sed -n 's/^step \([0-9]*\) | checkpoint .*/\1/p' run.log | tail -n 1)
[ -n "$at" ] && [ "$at" -ge 3 ] || { echo "checkpoint step '$at'"; exit 1; }
"$train" --resume run --steps $((at + 2)) --eval-every 0 --sample-tokens 0 \
  --threads 2 --out-dir resumed > resumed.log
grep -q "resumed from run/checkpoint-$(printf %08d "$at").safetensors at step $at" resumed.log
echo "ok: SIGINT at step $at -> exit 130, checkpoint, model and plot written; resumed at step $at"
