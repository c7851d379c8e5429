#!/usr/bin/env bash
# gptx-train's checkpoint retention (docs/checkpoints.md):
#   - --checkpoint-every 1 --keep-checkpoints 2 over 6 steps leaves exactly
#     the newest two numbered checkpoints and `latest` naming the newest
#     (model.safetensors and best.safetensors untouched);
#   - --resume DIR whose newest checkpoint is damaged (a flipped byte in its
#     tensors) falls back to the previous one, says so naming both, and
#     trains to the losses of an uninterrupted run, bit for bit;
#   - a run killed after a checkpoint is durable but before `latest` names it
#     (GPTX_TRAIN_TEST_KILL_BEFORE_LATEST) loses nothing: with
#     --keep-checkpoints 1 the previous checkpoint is still there, `latest`
#     names it, and --resume DIR continues to the uninterrupted losses;
#   - a folder of the layout before 0.6.0 (checkpoint.safetensors) resumes.
set -euo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# warm-up past the last step: the lr of a step does not depend on --steps
run=(--preset micro --threads 2 --sample-tokens 0 --warmup 20 --eval-every 3 --save-best 1)
losses() { grep -o '"train_loss": [0-9.]*' "$1"; }
"$train" "${run[@]}" --steps 6 --out-dir ref > ref.log

# ---- K=2 over 6 checkpoints ----------------------------------------------------------
"$train" "${run[@]}" --steps 6 --checkpoint-every 1 --keep-checkpoints 2 --out-dir keep > keep.log
[ "$(grep -c '| checkpoint ' keep.log)" -eq 6 ] || { echo "want 6 checkpoints written"; cat keep.log; exit 1; }
left=$(cd keep && ls checkpoint* latest | tr '\n' ' ')
[ "$left" = "checkpoint-00000005.safetensors checkpoint-00000006.safetensors latest " ] ||
  { echo "--keep-checkpoints 2 left: $left"; exit 1; }
[ "$(cat keep/latest)" = "checkpoint-00000006.safetensors" ] || { echo "latest: $(cat keep/latest)"; exit 1; }
[ -s keep/model.safetensors ] && [ -s keep/best.safetensors ] || { echo "model or best removed"; ls keep; exit 1; }
[ "$(losses keep/metrics.jsonl)" = "$(losses ref/metrics.jsonl)" ] || { echo "checkpoints changed the losses"; exit 1; }
echo "ok: --keep-checkpoints 2 over 6 checkpoints: $left"

# ---- a damaged newest checkpoint -------------------------------------------------------
"$train" "${run[@]}" --steps 4 --checkpoint-every 2 --out-dir dmg > dmg1.log
newest=dmg/checkpoint-00000004.safetensors
size=$(stat -c %s "$newest")
printf '\x55' | dd of="$newest" bs=1 seek=$((size - 4096)) conv=notrunc 2> /dev/null # in a tensor
"$train" --resume dmg --steps 6 --out-dir dmg > dmg2.log 2> dmg2.err ||
  { echo "damaged newest: the resume failed"; cat dmg2.err; exit 1; }
grep -q "^gptx-train: --resume dmg: $newest, the one \`latest\` names, cannot be used (GPTX_ERR_FORMAT: .*does not match its checksum.*resuming from the previous checkpoint, dmg/checkpoint-00000002.safetensors$" dmg2.err ||
  { echo "damaged newest: no fallback message"; cat dmg2.err; exit 1; }
grep -q "resumed from dmg/checkpoint-00000002.safetensors at step 2" dmg2.log ||
  { echo "damaged newest: not resumed from step 2"; cat dmg2.log; exit 1; }
[ "$(losses dmg/metrics.jsonl)" = "$(losses ref/metrics.jsonl)" ] ||
  { echo "fallback resume: losses differ"; losses dmg/metrics.jsonl; losses ref/metrics.jsonl; exit 1; }
[ "$(cat dmg/latest)" = "checkpoint-00000006.safetensors" ] || { echo "latest after the fallback"; exit 1; }
echo "ok: damaged newest -> $(head -c 120 dmg2.err)...; the uninterrupted losses"

# ---- killed between the checkpoint and latest -------------------------------------------
set +e
GPTX_TRAIN_TEST_KILL_BEFORE_LATEST=4 "$train" "${run[@]}" --steps 6 --checkpoint-every 2 \
  --keep-checkpoints 1 --out-dir kill > kill1.log 2>&1
rc=$?; set -e
[ "$rc" -eq 137 ] || { echo "the test hook did not kill the run: rc $rc"; cat kill1.log; exit 1; }
[ "$(cat kill/latest)" = "checkpoint-00000002.safetensors" ] && [ -s kill/checkpoint-00000002.safetensors ] ||
  { echo "after the kill: latest $(cat kill/latest 2>&1), files $(ls kill)"; exit 1; }
"$train" --resume kill --steps 6 --out-dir kill > kill2.log
grep -q "resumed from kill/checkpoint-00000002.safetensors at step 2" kill2.log ||
  { echo "after the kill: not resumed from step 2"; cat kill2.log; exit 1; }
[ "$(losses kill/metrics.jsonl)" = "$(losses ref/metrics.jsonl)" ] || { echo "after the kill: losses differ"; exit 1; }
left=$(cd kill && ls checkpoint* latest | tr '\n' ' ')
[ "$left" = "checkpoint-00000006.safetensors latest " ] || { echo "after the kill and resume: $left"; exit 1; }
echo "ok: killed before latest -> the step-2 checkpoint kept, resumed, the uninterrupted losses"

# ---- a folder of the layout before 0.6.0 ---------------------------------------------------
mkdir old && cp keep/checkpoint-00000006.safetensors old/checkpoint.safetensors
"$train" --resume old --steps 7 --out-dir old > old.log
grep -q "resumed from old/checkpoint.safetensors at step 6" old.log ||
  { echo "old layout: not resumed from checkpoint.safetensors"; cat old.log; exit 1; }
[ -s old/checkpoint.safetensors ] && [ "$(cat old/latest)" = "checkpoint-00000007.safetensors" ] ||
  { echo "old layout after the resume: $(ls old)"; exit 1; }
echo "ok: --resume DIR of the old layout resumes its checkpoint.safetensors (kept)"
echo "train_retention: all checks passed"
