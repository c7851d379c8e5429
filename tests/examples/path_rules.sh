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
