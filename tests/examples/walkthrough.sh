#!/usr/bin/env bash
# Runs the walkthrough of docs/programs.md exactly as written (the sh block
# between its walkthrough markers), in an empty folder with the programs on
# PATH and GPTX_DATA_DIR set, then checks what it should have produced.
set -euo pipefail
doc=$1 bindir=$2 data=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
sed -n '/<!-- walkthrough: begin -->/,/<!-- walkthrough: end -->/p' "$doc" |
  sed -n '/^```sh$/,/^```$/p' | sed '1d;$d' > "$work/walkthrough.sh"
[ "$(grep -c '^gptx-' "$work/walkthrough.sh")" -ge 5 ] || { echo "no walkthrough found in $doc"; exit 1; }
cd "$work"
export PATH="$bindir:$PATH" GPTX_DATA_DIR="$data"
echo "== running the walkthrough of $doc:"; cat walkthrough.sh
bash -euxo pipefail walkthrough.sh > walkthrough.log 2>&1 || { cat walkthrough.log; exit 1; }
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
