#!/usr/bin/env bash
# gptx-train --text on several files (examples/train/train_data.c):
#   order      a folder, and the reversed list of its files, give the same
#              documents, split and losses (sorted by path; hidden skipped)
#   split      with many documents validation is whole documents from the end
#              (with --doc-separator the parts of a file), with one the tail
#   compat     a run saved before 0.6 (no EOT added; the test hook
#              GPTX_TRAIN_TEST_LAYOUT_0_5 writes one) resumes on its old token
#              layout: the same losses as its uninterrupted run
# usage: train_corpus.sh PART GPTX_TRAIN DATA_DIR WORK_DIR
set -euo pipefail
part=$1 train=$2 data=$3 work=$4/$1
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL ($part): $*"; exit 1; }
run() { # out-dir args...: the run's log
  local out=$1; shift
  "$train" --preset micro --threads 2 --eval-every 2 --sample-tokens 0 --seed 3 --out-dir "$out" "$@" > "$out.log" ||
    fail "gptx-train $* failed: $(tail -3 "$out.log")"
  cat "$out.log"
}
# 12 documents of a story: its paragraphs, 3 files of 4 separated ones
mkdir -p corpus
awk -v RS= '{ print > sprintf("p%02d", NR % 12) }' "$data/the-verdict.txt"
for f in 0 1 2; do
  for d in 0 1 2 3; do cat "p0$((f * 4 + d))" 2>/dev/null || cat "p$((f * 4 + d))"; printf '\n@@@\n'; done > "corpus/f$f.txt"
done
rm -f p??
printf 'hidden\n' > corpus/.skip.txt

case $part in
order)
  a=$(run a --text corpus --steps 2 --doc-separator '\n@@@\n')
  b=$(run b --text corpus/f2.txt,corpus/f1.txt,corpus/f0.txt --steps 2 --doc-separator '\n@@@\n')
  for w in '^documents' '^unigram' '^final'; do
    [ "$(grep "$w" <<< "$a")" = "$(grep "$w" <<< "$b")" ] && [ -n "$(grep "$w" <<< "$a")" ] ||
      fail "a folder and the reversed list differ at $w: '$(grep "$w" <<< "$a")' vs '$(grep "$w" <<< "$b")'"
  done
  echo "ok: $(grep '^documents' <<< "$a")"
  ;;
split)
  a=$(run a --text corpus --steps 1 --doc-separator '\n@@@\n' --val-fraction 0.2)
  grep -q '^documents: 12, each after <|endoftext|>; validation: the last [1-9][0-9]* ' <<< "$a" ||
    fail "12 documents, not held out whole: $(grep '^documents' <<< "$a")"
  b=$(run b --text corpus --steps 1 --val-fraction 0.1) # 3 files, each over twice the share
  grep -q '^documents: 3, each after <|endoftext|>; validation: the tail of the tokens' <<< "$b" ||
    fail "3 big documents: $(grep '^documents' <<< "$b")"
  c=$(run c --text "$data/the-verdict.txt" --steps 1)
  grep -q '^documents: 1, each after <|endoftext|>; validation: the tail of the tokens' <<< "$c" ||
    fail "one file: $(grep '^documents' <<< "$c")"
  echo "ok: $(grep '^documents' <<< "$a"); $(grep '^documents' <<< "$b")"
  ;;
compat)
  GPTX_TRAIN_TEST_LAYOUT_0_5=1 run full --text "$data/the-verdict.txt" --steps 4 --checkpoint-every 2 > /dev/null
  GPTX_TRAIN_TEST_LAYOUT_0_5=1 run old --text "$data/the-verdict.txt" --steps 2 --checkpoint-every 2 > /dev/null
  grep -aq 'text_documents' old/checkpoint-00000002.safetensors && fail "the hook's checkpoint records text_documents"
  r=$(run resumed --resume old --steps 4)
  grep -q 'as one text, no <|endoftext|> added' <<< "$r" || fail "the old run resumed on the new layout: $(head -4 resumed.log)"
  losses() { grep -o '"train_loss": [0-9.]*' "$1"; }
  [ "$(losses full/metrics.jsonl | tail -n 2)" = "$(losses resumed/metrics.jsonl)" ] ||
    fail "the resumed old run's losses differ from its uninterrupted run's: $(losses resumed/metrics.jsonl | tr '\n' ' ')"
  [ -f resumed/checkpoint-00000004.safetensors ] || fail "the resumed run wrote no checkpoint"
  grep -aq 'text_documents' resumed/checkpoint-00000004.safetensors && fail "the resumed old run now records the new layout"
  n=$(run new --text "$data/the-verdict.txt" --steps 2 --checkpoint-every 2)
  grep -aq 'text_documents 1' new/checkpoint-00000002.safetensors || fail "a new run does not record text_documents 1"
  run new2 --resume new --steps 3 > /dev/null
  echo "ok: a 0.5-layout checkpoint resumes on its layout; a new one on the new"
  ;;
*) fail "unknown part" ;;
esac
