#!/usr/bin/env bash
# Runs a walkthrough of docs/programs.md exactly as written (the sh block
# between its markers: "walkthrough" by default, "corpus walkthrough" with
# the fifth argument corpus), in an empty folder with the programs on PATH
# and GPTX_DATA_DIR set, then checks what it should have produced.
set -euo pipefail
doc=$1 bindir=$2 data=$3 work=$4 which=${5:-story}
marker="walkthrough"
[ "$which" = corpus ] && marker="corpus walkthrough"
rm -rf "$work" && mkdir -p "$work"
sed -n "/<!-- $marker: begin -->/,/<!-- $marker: end -->/p" "$doc" |
  sed -n '/^```sh$/,/^```$/p' | sed '1d;$d' > "$work/walkthrough.sh"
[ "$(grep -c '^gptx-' "$work/walkthrough.sh")" -ge 5 ] || { echo "no $marker found in $doc"; exit 1; }
cd "$work"
export PATH="$bindir:$PATH" GPTX_DATA_DIR="$data"
echo "== running the $marker of $doc:"; cat walkthrough.sh
bash -euxo pipefail walkthrough.sh > walkthrough.log 2>&1 || { cat walkthrough.log; exit 1; }

if [ "$which" = corpus ]; then
  fail() { echo "FAIL: $*"; exit 1; }
  # 1. shards: train and validation shards, the manifest stating the split; the
  # held-out tokens more than the-verdict's 5145 (so Shakespeare's too: before
  # 0.7 validation was the-verdict alone, the first file)
  ls shards/corpus_val_*.bin shards/corpus_train_*.bin > /dev/null && [ -s shards/corpus.manifest ] ||
    fail "the shards or their manifest are missing: $(ls shards)"
  grep -q '^val_fraction 0.1$' shards/corpus.manifest || fail "the manifest does not state the split"
  vt=$(sed -n 's/^val_tokens //p' shards/corpus.manifest)
  [ "${vt:-0}" -gt 5145 ] || fail "$vt tokens held out: not drawn from both texts"
  # the shard run's unigram baseline, and a validation loss that learns with the training loss
  grep -q '"unigram_val_loss": [0-9]' crun/metrics.jsonl || fail "the shard run has no unigram baseline"
  val() { sed -n "s/^{\"type\": \"val\", \"step\": $1, \"val_loss\": \([0-9.]*\).*/\1/p" crun/metrics.jsonl | tail -1; }
  v0=$(val 0) v160=$(val 160)
  awk -v a="$v0" -v b="$v160" 'BEGIN { exit !(a != "" && b != "" && b < a - 2.0) }' ||
    fail "validation loss $v0 at step 0, $v160 at step 160: it did not follow training"
  # 2-3. retention: exactly the newest two numbered checkpoints, latest naming the newest
  ckpts=$(cd crun && ls checkpoint-*.safetensors | tr '\n' ' ')
  [ "$ckpts" = "checkpoint-00000120.safetensors checkpoint-00000160.safetensors " ] ||
    fail "the run kept '$ckpts', expected the checkpoints of steps 120 and 160"
  grep -q 'checkpoint-00000160.safetensors' crun/latest || fail "latest is '$(cat crun/latest)'"
  # every step from 1 to 160 once, across the run and its continuation
  steps=$(sed -n 's/^{"type": "train", "step": \([0-9]*\),.*/\1/p' crun/metrics.jsonl)
  [ "$(echo "$steps" | sort -n | uniq | wc -l)" = 160 ] && [ "$(echo "$steps" | wc -l)" = 160 ] &&
    [ "$(echo "$steps" | sort -n | tail -1)" = 160 ] ||
    fail "metrics.jsonl does not hold steps 1..160 once each"
  # 4. the exports, whole
  for f in crun/hf/model.safetensors crun/hf/config.json crun/hf/vocab.json crun/hf/merges.txt \
           crun/hf/tokenizer_config.json crun/model.bin crun/gpt2_tokenizer.bin; do
    [ -s "$f" ] || fail "the walkthrough did not write $f"
  done
  # 5. the model and its Hugging Face export score the same (the export is exact)
  acc() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1"; }
  for k in acc acc_norm; do
    [ -n "$(acc mc.json $k)" ] && [ "$(acc mc.json $k)" = "$(acc mc_hf.json $k)" ] ||
      fail "$k: the model $(acc mc.json $k), its export $(acc mc_hf.json $k)"
  done
  grep -v '^+' walkthrough.log | grep -E '^(acc|final)' || true
  echo "ok: shards ($vt tokens held out), val loss $v0 -> $v160, checkpoints 120 and 160 kept, steps 1..160, exports, acc $(acc mc.json acc)"
  exit 0
fi

grep -v '^+' walkthrough.log | grep -E '^(fine-tuning|final|loss|I had always)' || true

for f in run/model.safetensors run/metrics.jsonl run/loss.svg tuned/model.safetensors \
         base_story.json base_novel.json tuned_novel.json; do
  [ -s "$f" ] || { echo "the walkthrough did not write $f"; exit 1; }
done
loss() { sed -n 's/.*"loss": \([0-9.]*\).*/\1/p' "$1"; }
# the fine-tune starts from the trained model, not from a fresh one (whose
# loss is about ln 50257 = 10.8): its first validation shows it
start=$(sed -n 's/^{"type": "val", "step": 0, "val_loss": \([0-9.]*\).*/\1/p' tuned/metrics.jsonl)
grep -q '^{"type": "config", .*"init_from": "run/model.safetensors"' tuned/metrics.jsonl
awk -v v="$start" 'BEGIN { if (!(v != "" && v < 10.0)) { print "fine-tune step-0 val loss " v ": not the trained model"; exit 1 } }'

awk -v s="$(loss base_story.json)" -v n="$(loss base_novel.json)" -v t="$(loss tuned_novel.json)" 'BEGIN {
  if (!(s < n)) { print "the base model scores its own story (" s ") no better than the novel (" n ")"; exit 1 }
  if (!(t < n - 0.2)) { print "fine-tuning did not lower the loss on the novel: " n " -> " t; exit 1 }
  printf "ok: base model %.3f on the story, %.3f on the novel; fine-tuned %.3f on the novel\n", s, n, t
}'
