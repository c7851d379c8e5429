#!/usr/bin/env bash
# gptx-train --rank-invariant 1: the same command on 1, 2, 3, 4 and 8 ranks
# (mpirun, oversubscribed) trains the same bits. Each step is 8 micro-batches
# of 2 rows of the one global order (one process runs all 8; 3 ranks 3, 3
# and 2; 8 ranks one each), 20 steps, validation every 5:
#   - model.safetensors byte for byte equal to the single process's, for every
#     rank count, with --zero1 1 on 3 ranks, and for a run that trains 10
#     steps on 2 ranks and resumes on 3 (a rank count the checkpoint did not
#     have) to step 20;
#   - the metrics (train loss, lr, grad norm, tokens seen; validation loss and
#     tokens) equal line for line;
#   - the control: the same global batch without the option (the ranks'
#     micro-batches summed in fp32) gives another model on 2 ranks: without
#     it this test could not tell.
# The data: two llm.c shards of tokens below 256 written here (perl), so the
# model is tiny (vocab 256, width 32, 2 layers) and a run takes a second.
# usage: train_invariant.sh GPTX_TRAIN WORKDIR MPIRUN [MPIRUN ARGS...]
set -euo pipefail
train=$1 work=$2
shift 2
mpirun=("$@")
rm -rf "$work" && mkdir -p "$work"

shard() { # FILE COUNT SEED: an llm.c shard of COUNT ids in [0, 256)
  perl -e 'my ($p, $n, $s) = @ARGV; open(my $f, ">", $p) or die; binmode $f;
           print $f pack("l<3", 20240520, 1, $n), pack("l<253", (0) x 253); srand($s);
           print $f pack("S<", int(rand(256))) for 1 .. $n' "$1" "$2" "$3"
}
shard "$work/train.bin" 20000 7
shard "$work/val.bin" 3000 8

common=(--train-shards "$work/train.bin" --val-shards "$work/val.bin" --vocab-size 256
        --padded-vocab 256 --layers 2 --heads 2 --width 32 --context 16 --batch 2
        --eval-every 5 --eval-batches 4 --sample-tokens 0 --threads 1 --lr 3e-3 --warmup 2
        --lr-schedule constant) # the 10-step half has the 20-step run's rates
inv=("${common[@]}" --grad-accum 8 --rank-invariant 1)

run() { # NAME NP ARGS...: gptx-train on NP ranks (1: no launcher)
  local name=$1 np=$2
  shift 2
  if [ "$np" = 1 ]; then "$train" "$@" --out-dir "$work/$name" > "$work/$name.log" 2>&1
  else "${mpirun[@]}" -np "$np" "$train" "$@" --out-dir "$work/$name" > "$work/$name.log" 2>&1
  fi || { echo "run $name (np $np) failed:"; cat "$work/$name.log"; exit 1; }
}

# every metric but the times, one line per row
metrics() {
  sed -E 's/, "(step_seconds|tokens_per_second|memory_peak_bytes)": [^,}]*//g' "$1/metrics.jsonl" |
    grep -E '"type": "(train|val)"'
}

# rows a run resumed at step 10 writes: training steps 11.., validation 10..
after_10() {
  awk '{ match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0 }
       /"type": "train"/ && s > 10 || /"type": "val"/ && s >= 10'
}

run single 1 "${inv[@]}" --steps 20
grep -q "rank-invariant: each step's 8 micro-batches" "$work/single.log" ||
  { echo "no rank-invariant line in the header"; cat "$work/single.log"; exit 1; }
for np in 2 3 4 8; do run np$np "$np" "${inv[@]}" --steps 20; done
run zero3 3 "${inv[@]}" --steps 20 --zero1 1
run half2 2 "${inv[@]}" --steps 10 --checkpoint-every 10
run resumed3 3 --resume "$work/half2" --steps 20

want=$(metrics "$work/single")
[ "$(printf '%s\n' "$want" | grep -c '"type": "train"')" = 20 ] ||
  { echo "single: not 20 training rows"; printf '%s\n' "$want"; exit 1; }
for name in np2 np3 np4 np8 zero3 resumed3; do
  cmp "$work/single/model.safetensors" "$work/$name/model.safetensors" ||
    { echo "$name: model.safetensors differs from one process's"; exit 1; }
  got_now=$(metrics "$work/$name") want_now=$want
  if [ "$name" = resumed3 ]; then # the rows the resumed part wrote: training after step 10
    want_now=$(printf '%s\n' "$want" | after_10)
    got_now=$(printf '%s\n' "$got_now" | after_10)
  fi
  rows=$(printf '%s\n' "$got_now" | grep -c '"type"' || true)
  [ "$rows" -ge 13 ] || { echo "$name: only $rows metrics rows to compare"; exit 1; }
  if [ "$got_now" != "$want_now" ]; then
    echo "$name: metrics differ from one process's:"
    diff <(printf '%s\n' "$want_now") <(printf '%s\n' "$got_now") | head -20
    exit 1
  fi
done

# the control: the same 16 rows a step, summed in fp32 per rank and averaged
run plain1 1 "${common[@]}" --grad-accum 8 --steps 20
run plain2 2 "${common[@]}" --grad-accum 4 --steps 20
if cmp -s "$work/plain1/model.safetensors" "$work/plain2/model.safetensors"; then
  echo "control: without --rank-invariant 1 and 2 ranks gave the same model: the test cannot tell"
  exit 1
fi
echo "train_invariant: 1, 2, 3, 4, 8 ranks, ZeRO-1 on 3, 2 resumed on 3: the same model bytes and metrics; without the option 2 ranks differ"
