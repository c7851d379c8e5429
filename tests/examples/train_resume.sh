#!/usr/bin/env bash
# gptx-train end to end: a short run writes metrics, a loss curve and a
# checkpoint; gptx-generate samples from that checkpoint; 3 steps + resume +
# 3 steps reproduce the losses of 6 uninterrupted steps exactly; bad flags
# fail with one clear message and exit code 2.
set -euo pipefail
train=$1 generate=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--eval-every 3 --sample-tokens 8 --threads 2 --batch 4)

"$train" "${common[@]}" --steps 6 --save-best 1 --out-dir "$work/full" > "$work/full.log"
# --save-best: best.safetensors at each evaluation after step 0 that improves on every earlier one
improved=$(grep -o '"type": "val", "step": [0-9]*, [^}]*"val_loss": [0-9.]*' "$work/full/metrics.jsonl" |
  awk -F'[:,]' '{ s = $4 + 0; v = $NF + 0; if (NR == 1 || v < best) { best = v; if (s > 0) n++ } } END { print n + 0 }')
saved=$(grep -c 'best validation loss so far' "$work/full.log" || true)
[ "$improved" -ge 1 ] && [ "$saved" -eq "$improved" ] && [ -s "$work/full/best.safetensors" ] ||
  { echo "--save-best: $saved saves for $improved improvements"; cat "$work/full.log"; exit 1; }
"$train" "${common[@]}" --steps 3 --checkpoint-every 3 --out-dir "$work/part" > "$work/part1.log"
# same total schedule (6 steps), resumed at step 3: every other flag (batch,
# evaluation, sampling, threads, data) comes from the checkpoint
"$train" --resume "$work/part" --steps 6 --out-dir "$work/part2" > "$work/part2.log"
grep -q "resumed from $work/part/checkpoint-00000003.safetensors at step 3" "$work/part2.log"
grep -q "4 x 64 tokens" "$work/part2.log" || { echo "the resumed run lost --batch 4"; cat "$work/part2.log"; exit 1; }
# the same data under another path is the same run; flags may repeat the run's values
text=$(sed -n 's/.*"data": "\([^"]*\)".*/\1/p' "$work/part/metrics.jsonl" | head -n 1)
cp "$text" "$work/same.txt"
"$train" --resume "$work/part/checkpoint-00000003.safetensors" --steps 4 --batch 4 --text "$work/same.txt" \
  --out-dir "$work/part3" > "$work/part3.log"

for f in "$work/full/metrics.jsonl" "$work/full/loss.svg" "$work/part/checkpoint-00000003.safetensors"; do
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

out=$("$generate" --model "$work/part/checkpoint-00000003.safetensors" --max-tokens 5 --threads 2)
case "$out" in "Every effort moves you"*) ;; *) echo "unexpected generate output: $out"; exit 1;; esac

# a resume that would not continue the same run is refused, with the reason
refuse() { # expected-message flags...
  local want=$1; shift
  set +e; msg=$("$train" --resume "$work/part/checkpoint-00000003.safetensors" "$@" --out-dir "$work/bad" 2>&1 >/dev/null); rc=$?; set -e
  [ "$rc" -ne 0 ] || { echo "resume with '$*' should be refused"; exit 1; }
  case "$msg" in *"$want"*) echo "ok: resume with '$*' -> rc $rc: ${msg:0:150}";;
    *) echo "resume with '$*': expected '$want' in: $msg"; exit 1;; esac
}
refuse "--lr 0.01 differs from the run's 0.001" --steps 6 --lr 0.01
refuse "--width 64 differs from the run's 128" --width 64
refuse "--batch 8 differs from the run's 4" --preset tiny
head -c 3000 "$text" > "$work/other.txt"
refuse "is not what the run trained on" --steps 6 --text "$work/other.txt" --val-fraction 0.1
set +e; msg=$("$train" --resume "$work/full/model.safetensors" --steps 6 --out-dir "$work/bad" 2>&1 >/dev/null); rc=$?; set -e
[ "$rc" -eq 1 ] && [[ "$msg" == *"a model file"* ]] || { echo "resume of a model file: rc $rc: $msg"; exit 1; }
refuse "is at step 3; --steps 3 is already reached" --steps 3

for bad in "--steps x" "--lr-schedule wavy" "--nope 1" "--text /nonexistent/file.txt"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$train" $bad --out-dir "$work/bad" 2>&1 >/dev/null); rc=$?
  set -e
  if [ "$rc" -eq 0 ] || [ -z "$msg" ]; then echo "'$bad' should fail with a message (rc=$rc)"; exit 1; fi
  echo "ok: '$bad' -> rc $rc: $(echo "$msg" | head -n 1)"
done
# the bundled tokenizer and text are recorded relative to the data folder (a
# moved prefix resumes: install_downstream); a file the run recorded that is
# gone is named once, with the flag that gives its new place (issue 35, item 4)
grep -q 'bundled:gpt2/encoder.json' "$work/part/metrics.jsonl" ||
  { echo "the record has no bundled tokenizer"; grep -m1 config "$work/part/metrics.jsonl"; exit 1; }
cp "$text" "$work/mine.txt"
"$train" "${common[@]}" --steps 2 --checkpoint-every 2 --text "$work/mine.txt" --out-dir "$work/gone" \
  > "$work/gone1.log"
rm "$work/mine.txt"
set +e; msg=$("$train" --resume "$work/gone" --steps 3 2>&1 >/dev/null); rc=$?; set -e
want="gptx-train: --resume $work/gone: the run's --text $work/mine.txt is gone (No such file or directory); give --text with where it is now"
if [ "$rc" != 1 ] || [ "$(grep -c . <<< "$msg")" != 1 ] || [[ "$msg" != "$want"* ]]; then
  echo "a gone --text: rc $rc, message '$msg' (wanted one line starting '$want')"; exit 1
fi
echo "ok: $msg"

echo "train_resume: all checks passed"
