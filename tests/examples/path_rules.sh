#!/usr/bin/env bash
# The programs' path rules (docs/reliability.md, "Path rules"; issue 34): a
# path the program did not create is never treated as its own. One part per
# rule, each the reproduction of a defect of issue 34 (item N) and the rest
# of its class:
#   resume_dir      --resume DIR continues in DIR wherever it is now (item 1)
#   run_links       a run never writes through a link in its folder (item 2)
#   export_out      an existing --out is refused unless --overwrite, never the
#                   input itself; so are gptx-eval's --json/--details (item 3)
#   inputs_outputs  inputs and outputs never overlap; token shards and the
#                   programs' records are not text (item 4)
#   latest_fifo     a FIFO is never waited on (item 5)
#   threads         one --threads bound, before OpenBLAS starts (item 6)
#   fsize           a file size limit is an error, nothing left (item 7)
#   ignored_input   conflicting or useless flags are refused (item 8)
#   latest_messages an unusable `latest` is named with the checkpoint used; a
#                   folder at a checkpoint's path is refused before training
#                   (item 9)
#   messages        the other programs' messages name the flag or file (item 9)
#   sigterm         SIGTERM stops gptx-train as Ctrl-C does (item 10)
# usage: path_rules.sh PART BIN_DIR WORK_DIR
set -euo pipefail
part=$1 bin=$2 work=$3/$1
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0") # a text file for the programs to read
train="$bin/gptx-train" generate="$bin/gptx-generate" export="$bin/gptx-export"
tokenize="$bin/gptx-tokenize" eval="$bin/gptx-eval"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
T=("$train" --preset micro --threads 1 --eval-every 0 --sample-tokens 0)

fail() { echo "FAIL ($part): $*"; exit 1; }
# expect RC NEEDLE CMD...: exit status RC within 20 s, stderr holding NEEDLE
expect() {
  local want=$1 needle=$2; shift 2
  set +e
  timeout 20 "$@" > out.txt 2> err.txt; local rc=$?
  set -e
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$needle" err.txt; then
    echo "stderr:"; cat err.txt; fail "$* -> rc $rc (want $want; stderr should hold: $needle)"
  fi
  echo "ok: rc $rc: $(head -n 1 err.txt | cut -c1-200)"
}
rows() { local n; n=$(grep -c '"type": "train"' "$1" 2> /dev/null) || true; echo "${n:-0}"; }
sums() { (cd "$1" && find . -type f -exec md5sum {} + | sort -k 2); }

case $part in
resume_dir)
  "${T[@]}" --steps 6 --checkpoint-every 3 --out-dir run > /dev/null
  cp -a run run.bak
  "$train" --resume run --steps 20 > /dev/null
  before=$(sums run)
  "$train" --resume run.bak --steps 9 > bak.log
  grep -q "resumed from run.bak/checkpoint-00000006.safetensors at step 6" bak.log || fail "$(cat bak.log)"
  [ "$(sums run)" = "$before" ] || fail "resuming run.bak changed run: $(cat run/latest), $(rows run/metrics.jsonl) rows"
  [ "$(cat run.bak/latest)" = checkpoint-00000009.safetensors ] && [ "$(rows run.bak/metrics.jsonl)" = 9 ] ||
    fail "run.bak did not continue in run.bak: latest $(cat run.bak/latest), $(rows run.bak/metrics.jsonl) rows"
  echo "ok: cp -a run run.bak; each resumed in its own folder, the other untouched"
  mv run.bak run.moved
  "$train" --resume run.moved --steps 12 > /dev/null
  [ ! -e run.bak ] && [ "$(cat run.moved/latest)" = checkpoint-00000012.safetensors ] ||
    fail "a moved folder: $(ls)"
  mkdir elsewhere
  (cd elsewhere && "$train" --resume "$work/run.moved" --steps 14 > ../abs.log)
  [ -z "$(ls elsewhere)" ] && [ "$(cat run.moved/latest)" = checkpoint-00000014.safetensors ] ||
    fail "--resume /abs/dir from another folder wrote $(ls elsewhere)"
  # --resume FILE: the folder that holds it
  (cd elsewhere && "$train" --resume ../run.moved/checkpoint-00000012.safetensors --steps 16 > ../file.log)
  [ -z "$(ls elsewhere)" ] && [ "$(cat run.moved/latest)" = checkpoint-00000016.safetensors ] ||
    fail "--resume FILE did not continue in the file's folder"
  echo "ok: a moved folder, an absolute path from another folder and a checkpoint file continue in their folder"
  ;;
run_links)
  "${T[@]}" --steps 4 --checkpoint-every 4 --out-dir runA > /dev/null
  "${T[@]}" --steps 2 --checkpoint-every 2 --out-dir runB > /dev/null
  a=$(sums runA)
  ln -sf ../runA/checkpoint-00000004.safetensors runB/latest
  ln -s ../runA/checkpoint-00000004.safetensors runB/checkpoint-00000006.safetensors
  ln -sf ../runA/model.safetensors runB/model.safetensors
  ln -sf ../runA/loss.svg runB/loss.svg
  expect 0 "runB/latest cannot be used (it is a symbolic link" "$train" --resume runB --steps 6
  grep -q "resuming from the newest checkpoint of the folder, runB/checkpoint-00000002.safetensors" err.txt ||
    fail "the link to runA's checkpoint was taken for runB's: $(cat err.txt)"
  [ "$(sums runA)" = "$a" ] || fail "runA's files were written through runB's links"
  for f in latest checkpoint-00000006.safetensors model.safetensors loss.svg; do
    [ -f "runB/$f" ] && [ ! -L "runB/$f" ] || fail "runB/$f is not runB's own file"
  done
  [ "$(cat runB/latest)" = checkpoint-00000006.safetensors ] || fail "runB/latest: $(cat runB/latest)"
  echo "ok: links to runA's files in runB: replaced by runB's own, runA unchanged"
  # a new run: a link among the run's files is another run's file; --overwrite removes the link
  mkdir runC && ln -s ../runA/checkpoint-00000004.safetensors runC/latest
  expect 1 "runC holds another run's files (latest)" "${T[@]}" --steps 1 --out-dir runC
  "${T[@]}" --steps 1 --out-dir runC --overwrite > /dev/null
  [ "$(sums runA)" = "$a" ] && [ ! -e runC/latest ] || fail "--overwrite of a link"
  echo "ok: a new run refuses a link among its files; --overwrite removes the link, not its target"
  ;;
export_out)
  "${T[@]}" --steps 2 --checkpoint-every 2 --out-dir ex1 > /dev/null
  ck=ex1/checkpoint-00000002.safetensors
  sum=$(md5sum < "$ck")
  # its own input, through the same path or a link, --overwrite or not: exit 2, untouched
  expect 2 "it is the input --model $ck (the same file)" "$export" --model "$ck" --format llmc --out "$ck"
  ln -s "$ck" ck.link
  expect 2 "it is the input --model $ck" "$export" --model "$ck" --format llmc --out ck.link --overwrite
  [ "$(md5sum < "$ck")" = "$sum" ] || fail "the training checkpoint was replaced"
  # a user's file: refused without --overwrite, replaced with it
  echo "my notes" > notes.txt
  expect 1 "--out notes.txt exists (a regular file): give --overwrite" "$export" --model ex1/model.safetensors --format llmc --out notes.txt
  [ "$(cat notes.txt)" = "my notes" ] || fail "notes.txt was replaced"
  "$export" --model ex1/model.safetensors --format llmc --out notes.txt --overwrite > /dev/null
  [ "$(head -c 8 notes.txt | od -An -tu4 | awk '{print $1}')" = 20240326 ] || fail "--overwrite wrote no llm.c file"
  # hf: the folder's files, the tokenizer copies included
  "$export" --model ex1/model.safetensors --format hf --out hf > /dev/null
  expect 1 "--out hf/model.safetensors exists" "$export" --model ex1/model.safetensors --format hf --out hf
  expect 2 "it is the input --model hf" "$export" --model hf --format hf --out hf --overwrite
  expect 2 "it is the input --encoder hf/vocab.json" "$export" --model ex1/model.safetensors --format hf \
    --out hf --encoder hf/vocab.json --vocab hf/merges.txt --overwrite
  "$export" --model ex1/model.safetensors --format hf --out hf --overwrite > /dev/null
  echo "ok: gptx-export never replaces its input; an existing --out only with --overwrite"
  # gptx-eval's --json and --details follow the same rules; a stream is written as it is
  printf 'The cat sat on the mat, and the dog sat on the log by the door.\n' > text.txt
  expect 2 "it is the input --text text.txt" "$eval" --model ex1/model.safetensors --text text.txt --json text.txt --overwrite
  [ "$(head -c 7 text.txt)" = "The cat" ] || fail "gptx-eval replaced its --text"
  echo '{}' > res.json
  expect 1 "--json res.json exists (a regular file)" "$eval" --model ex1/model.safetensors --text text.txt --json res.json
  "$eval" --model ex1/model.safetensors --text text.txt --json res.json --overwrite > /dev/null
  grep -q perplexity res.json || fail "--json --overwrite"
  "$eval" --model ex1/model.safetensors --text text.txt --json /dev/stdout > stdout.json
  grep -q perplexity stdout.json || fail "--json /dev/stdout into a file"
  expect 2 "it is the input --model ex1/model.safetensors" "$eval" --model ex1/model.safetensors \
    --multiple-choice "$self" --details ex1/model.safetensors
  echo "ok: gptx-eval --json/--details: never an input, an existing file only with --overwrite, a stream as it is"
  ;;
inputs_outputs)
  # gptx-tokenize with the input folder as --out-dir: its outputs are not read back
  mkdir corp
  for i in 1 2 3; do printf 'Document %s. The cat sat on the mat.\n' "$i" > "corp/a$i.txt"; done
  "$tokenize" --input corp/ --out-dir corp --shard-tokens 20 > /dev/null
  before=$(sums corp)
  expect 1 "--input corp/a1.manifest is one of the files this run writes in --out-dir corp" \
    "$tokenize" --input corp/ --out-dir corp --shard-tokens 20
  expect 1 "corp/a1.manifest is a gptx-tokenize manifest or progress record, not text" \
    "$tokenize" --input corp/ --out-dir corp --shard-tokens 20 --prefix b
  [ "$(sums corp)" = "$before" ] || fail "the refused runs changed corp"
  # the pair: its own shard as input
  mkdir self2 && cp corp/a1.txt self2/x.txt
  "$tokenize" --input self2/x.txt --out-dir self2 > /dev/null
  expect 1 "--input self2/x_train.bin is one of the files this run writes" \
    "$tokenize" --input self2/x_train.bin --out-dir self2 --prefix x
  [ -L self2/x_train.bin ] && [ "$(readlink self2/x_train.bin)" = x.shards/x_train.bin ] || fail "x_train.bin changed"
  # a user's file at the pair's name is not an older shard: refused before the text is read
  mkdir mine && echo "my data" > mine/x_train.bin
  expect 1 "mine/x_train.bin: File exists (not a link or a token shard" "$tokenize" --input self2/x.txt --out-dir mine --prefix x
  [ "$(cat mine/x_train.bin)" = "my data" ] || fail "the user's x_train.bin was replaced"
  # a folder of shards given as text
  mkdir tkref && cp corp/a1_val_000000.bin tkref/
  expect 1 "--text tkref/a1_val_000000.bin is an llm.c token shard (magic 20240520), not text" \
    "${T[@]}" --text tkref/ --steps 1 --out-dir tt
  "${T[@]}" --steps 1 --out-dir tt0 > /dev/null
  expect 1 "--text tt0/model.safetensors is a safetensors file" "$eval" --model tt0/model.safetensors \
    --text tt0/model.safetensors
  # gptx-train: an input kept in --out-dir is never replaced, --overwrite or not
  sum=$(md5sum < tt0/model.safetensors)
  expect 1 "its model.safetensors is this run's --init-from tt0/model.safetensors" \
    "${T[@]}" --steps 1 --init-from tt0/model.safetensors --out-dir tt0 --overwrite
  [ "$(md5sum < tt0/model.safetensors)" = "$sum" ] || fail "--init-from was replaced"
  sum=$(md5sum < tt0/metrics.jsonl)
  expect 1 "its metrics.jsonl is this run's --text tt0/metrics.jsonl" \
    "${T[@]}" --steps 1 --text tt0/metrics.jsonl --out-dir tt0 --overwrite
  [ "$(md5sum < tt0/metrics.jsonl)" = "$sum" ] || fail "the --text metrics.jsonl was replaced"
  echo "ok: inputs and outputs never overlap; shards and records are not text"
  ;;
threads)
  "${T[@]}" --steps 1 --out-dir run > /dev/null
  expect 2 "--threads 4096: must be in [0, " "$generate" --model run/model.safetensors --threads 4096
  max=$(sed -n 's/.*must be in \[0, \([0-9]*\)\].*/\1/p' err.txt)
  [ -n "$max" ] && [ "$max" -ge 1 ] || fail "no bound in: $(cat err.txt)"
  [ ! -s out.txt ] || fail "gptx-generate printed on stdout: $(head -c 300 out.txt)"
  for p in "$train --steps 1 --out-dir t2" "$eval --model run/model.safetensors --text $self"; do
    expect 2 "--threads $((max + 1)): must be in [0, $max]" $p --threads $((max + 1))
  done
  # at the bound: only the generated text on stdout, no OpenBLAS line anywhere
  "$generate" --model run/model.safetensors --max-tokens 4 --threads "$max" > gen.out 2> gen.err ||
    fail "--threads $max: $(cat gen.err)"
  [ "$(wc -l < gen.out)" -eq 1 ] && ! grep -q -i openblas gen.out gen.err ||
    fail "--threads $max printed: $(head -c 400 gen.out gen.err)"
  echo "ok: --threads above $max refused before any thread starts, stdout empty; $max runs clean"
  ;;
fsize)
  "${T[@]}" --steps 1 --out-dir run > /dev/null
  cp "$bin/../share/gptx/the-verdict.txt" story.txt 2> /dev/null || head -c 20000 "$self" > story.txt
  # limited() LIMIT_KB CMD...: the command under a file size limit, SIGXFSZ at its default
  limited() { local kb=$1; shift; set +e; (ulimit -f "$kb"; exec "$@") > lim.out 2> lim.err; rc=$?; set -e; }
  limited 20000 "${T[@]}" --steps 2 --checkpoint-every 1 --out-dir big
  [ "$rc" -eq 1 ] && grep -q "File too large" lim.err || fail "gptx-train under ulimit -f: rc $rc: $(cat lim.err)"
  limited 5000 "$export" --model run/model.safetensors --format llmc --out uf.bin
  [ "$rc" -eq 1 ] && grep -q "File too large" lim.err || fail "gptx-export under ulimit -f: rc $rc: $(cat lim.err)"
  mkdir pair
  limited 4 "$tokenize" --input story.txt --out-dir pair
  [ "$rc" -eq 1 ] && grep -q "File too large" lim.err || fail "gptx-tokenize under ulimit -f: rc $rc: $(cat lim.err)"
  left=$(find . -name '*.tmp*' -o -name '*.shards.*' | head -n 5)
  [ -z "$left" ] && [ ! -e uf.bin ] || fail "left behind: $left $(ls uf.bin 2> /dev/null)"
  echo "ok: ulimit -f: train, export and tokenize say 'File too large', exit 1, leave nothing"
  ;;
ignored_input)
  "${T[@]}" --steps 1 --out-dir run > /dev/null
  echo "Once upon a time" > pf.txt
  expect 2 "--prompt-file pf.txt: not with --prompt" "$generate" --model run/model.safetensors --prompt Zebra --prompt-file pf.txt
  [ ! -s out.txt ] || fail "gptx-generate generated: $(cat out.txt)"
  "$tokenize" --input "$self" --out-dir sh > /dev/null
  expect 2 "--save-best 1: needs a validation loss: with --train-shards, give --val-shards" \
    "${T[@]}" --train-shards sh --steps 1 --save-best 1 --out-dir nv
  "${T[@]}" --train-shards "sh/path_rules_train.bin" --steps 2 --out-dir nv > nv.log
  grep -q "final: train loss [0-9.]*, no validation loss (no --val-shards)" nv.log ||
    fail "$(grep final nv.log)"
  echo "ok: --prompt with --prompt-file, --save-best without validation data: refused; no 'val loss nan'"
  ;;
messages)
  "${T[@]}" --steps 1 --out-dir run > /dev/null
  m=run/model.safetensors
  expect 2 "--window 33: must be in [0, 32]: the context length of $m" "$generate" --model "$m" --window 33
  expect 2 "--keep 32: must be -1 (half the window) or in [0, 31]" "$generate" --model "$m" --keep 32
  "$export" --model "$m" --format hf --out hf > /dev/null
  cp -r hf eps && sed -i 's/"layer_norm_epsilon": [^,]*/"layer_norm_epsilon": -1/' eps/config.json
  expect 1 'eps/config.json: "layer_norm_epsilon" is -1; expected a number > 0' "$generate" --model eps
  cp -r hf heads && sed -i 's/"n_head": [^,]*/"n_head": 3/' heads/config.json
  expect 1 'heads/config.json does not fit heads/model.safetensors: its "n_head" is 3; must divide' "$generate" --model heads
  printf '{"ctx": "a", "ctx": "b", "endings": ["x", "y"], "label": 0}\n' > dup.jsonl
  expect 1 'dup.jsonl line 1: "ctx" appears twice in the object' "$eval" --model "$m" --multiple-choice dup.jsonl
  printf '{"ctx": "a", "endings": ["x", "y"], "label": null}\n' > null.jsonl
  expect 1 "null.jsonl line 1: \"label\" is not a number: expected an ending's index" "$eval" --model "$m" --multiple-choice null.jsonl
  printf '\xef\xbb\xbf{"ctx": "A cat", "endings": [" sat", " ran"], "label": 0}\n' > bom.jsonl
  "$eval" --model "$m" --multiple-choice bom.jsonl > bom.txt 2> bom.err || fail "a BOM: $(cat bom.err)"
  grep -q "1 examples" bom.txt || fail "$(cat bom.txt)"
  if [ -w /dev/full ]; then
    expect 1 "cannot write --json /dev/full: No space left on device" "$eval" --model "$m" --text "$self" --max-tokens 50 --json /dev/full
  fi
  echo "ok: --window/--keep name the flag; config.json is named; duplicate keys, null labels refused; a BOM read"
  ;;
latest_fifo)
  "${T[@]}" --steps 2 --checkpoint-every 2 --out-dir run > /dev/null
  rm run/latest && mkfifo run/latest
  expect 1 "run/latest cannot be used (it is a FIFO (named pipe)" "$train" --resume run --steps 4
  [ -p run/latest ] || fail "the FIFO was replaced"
  grep -q "its latest is a FIFO (named pipe), not a regular file" err.txt || fail "$(cat err.txt)"
  echo "ok: a FIFO latest: named, never waited on, refused before training"
  ;;
latest_messages)
  "${T[@]}" --steps 2 --checkpoint-every 1 --out-dir run > /dev/null
  "${T[@]}" --steps 1 --checkpoint-every 1 --out-dir other > /dev/null
  for kind in empty bytes relative absolute model big link; do
    rm -f run/latest
    case $kind in
      empty) : > run/latest ;;
      bytes) printf '\x01\xfe\x80garbage\x7f' > run/latest ;;
      relative) echo ../other/checkpoint-00000001.safetensors > run/latest ;;
      absolute) echo "$work/other/checkpoint-00000001.safetensors" > run/latest ;;
      model) echo model.safetensors > run/latest ;;
      big) { yes checkpoint-00000001.safetensors || true; } | head -c 50000000 > run/latest ;;
      link) ln -s ../other/checkpoint-00000001.safetensors run/latest ;;
    esac
    # naming both: the `latest` not used and the checkpoint used instead
    expect 1 "run/latest cannot be used (" "$train" --resume run --steps 2
    grep -q "); resuming from the newest checkpoint of the folder, run/checkpoint-00000002.safetensors" err.txt ||
      fail "$kind: $(cat err.txt)"
  done
  echo "ok: an empty, random, relative, absolute, model, 50 MB or link latest: named with the checkpoint used"
  rm run/latest
  mkdir run/checkpoint-00000004.safetensors
  expect 1 "its checkpoint-00000004.safetensors is a directory, not a regular file" "$train" --resume run --steps 4
  rmdir run/checkpoint-00000004.safetensors && mkfifo run/checkpoint-00000003.safetensors
  expect 1 "its checkpoint-00000003.safetensors is a FIFO (named pipe), not a regular file" "$train" --resume run --steps 4
  [ "$(rows run/metrics.jsonl)" = 2 ] || fail "the run trained before refusing: $(rows run/metrics.jsonl) rows"
  echo "ok: a folder or FIFO at a checkpoint's path: refused before the first step"
  ;;
sigterm)
  c=(--lr-schedule constant --warmup 0 --grad-accum 4)
  "${T[@]}" "${c[@]}" --steps 100000 --log-every 1 --out-dir run > run.log 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ "$(rows run/metrics.jsonl)" -ge 3 ] && break; sleep 0.1; done
  kill -TERM "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  [ "$rc" -eq 143 ] || { cat run.log; fail "exit status $rc after SIGTERM, expected 143"; }
  grep -q 'terminated (SIGTERM): validating, writing the checkpoint' run.log || fail "$(tail -n 3 run.log)"
  for f in run/latest run/model.safetensors run/loss.svg; do [ -s "$f" ] || fail "no $f after SIGTERM"; done
  [ -z "$(find run -name '*.tmp*')" ] || fail "temp files left: $(find run -name '*.tmp*')"
  at=$(sed -n 's/^step \([0-9]*\) | checkpoint .*/\1/p' run.log | tail -n 1)
  [ -n "$at" ] && [ "$at" -ge 3 ] || fail "checkpoint step '$at'"
  # the checkpoint is the state after step $at (a step cut short is abandoned whole):
  # resumed to $at + 2, the losses of an uninterrupted run
  "$train" --resume run --steps $((at + 2)) > /dev/null
  "${T[@]}" "${c[@]}" --steps $((at + 2)) --out-dir ref > /dev/null
  loss() { grep -o '"step": [0-9]*, "train_loss": [0-9.]*' "$1" | tail -n 2; }
  [ "$(loss run/metrics.jsonl)" = "$(loss ref/metrics.jsonl)" ] ||
    fail "resumed after SIGTERM: $(loss run/metrics.jsonl) vs uninterrupted $(loss ref/metrics.jsonl)"
  echo "ok: SIGTERM at step $at -> 143, checkpoint, model, plot, no temp; resumed to the uninterrupted losses"
  ;;
*) fail "unknown part" ;;
esac
