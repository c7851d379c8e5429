#!/usr/bin/env bash
# gptx-train end to end: a short run writes metrics, a loss curve and a
# checkpoint; gptx-generate samples from that checkpoint; 3 steps + resume +
# 3 steps reproduce the losses of 6 uninterrupted steps exactly; bad flags
# fail with one clear message and exit code 2.
set -euo pipefail
train=$1 generate=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--steps 6 --eval-every 3 --sample-tokens 8 --threads 2 --batch 4)

"$train" "${common[@]}" --out-dir "$work/full" > "$work/full.log"
"$train" "${common[@]}" --steps 3 --checkpoint-every 3 --out-dir "$work/part" > "$work/part1.log"
# same total schedule (6 steps), resumed at step 3
"$train" "${common[@]}" --resume "$work/part/checkpoint.safetensors" --out-dir "$work/part2" > "$work/part2.log"

for f in "$work/full/metrics.jsonl" "$work/full/loss.svg" "$work/part/checkpoint.safetensors"; do
  [ -s "$f" ] || { echo "missing or empty: $f"; exit 1; }
done
grep -q '<svg' "$work/full/loss.svg"
grep -q '"val_loss"' "$work/full/metrics.jsonl"
grep -q 'sample: Every effort moves you' "$work/full.log"

losses() { grep -o '"train_loss": [0-9.]*' "$1"; }
want=$(losses "$work/full/metrics.jsonl" | tail -n 3)
got=$(losses "$work/part2/metrics.jsonl")
if [ "$want" != "$got" ]; then
  echo "resumed losses differ:"; echo "uninterrupted:"; echo "$want"; echo "resumed:"; echo "$got"; exit 1
fi

out=$("$generate" --model "$work/part/checkpoint.safetensors" --max-tokens 5 --threads 2)
case "$out" in "Every effort moves you"*) ;; *) echo "unexpected generate output: $out"; exit 1;; esac

for bad in "--steps x" "--lr-schedule wavy" "--nope 1" "--text /nonexistent/file.txt"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$train" $bad --out-dir "$work/bad" 2>&1 >/dev/null); rc=$?
  set -e
  if [ "$rc" -eq 0 ] || [ -z "$msg" ]; then echo "'$bad' should fail with a message (rc=$rc)"; exit 1; fi
  echo "ok: '$bad' -> rc $rc: $(echo "$msg" | head -n 1)"
done
echo "train_resume: all checks passed"
