#!/usr/bin/env bash
# gptx-train data parallel, end to end: 2 and 3 ranks on the same global
# batch as one process give the same train and validation losses (fp32
# tolerance), also with --zero1 1 and with --overlap; rank 0 alone prints, and labels its numbers global; a
# checkpoint written under mpirun resumes under mpirun to the uninterrupted
# run's losses exactly (also under ZeRO-1); a loss that is not finite on one rank stops every
# rank at that step; torchrun-style variables on a CPU context fail with a
# message that says to use mpirun.
# usage: train_dp.sh GPTX_TRAIN WORKDIR MPIRUN [MPIRUN ARGS...]
set -euo pipefail
train=$1 work=$2
shift 2
mpirun=("$@")
rm -rf "$work" && mkdir -p "$work"
# a small model; the global batch is 6 rows (--steps given per run: a flag given twice is refused)
common=(--eval-every 2 --eval-batches 3 --sample-tokens 4 --layers 2 --heads 2
        --width 64 --context 32 --threads 1)

"$train" "${common[@]}" --steps 4 --batch 6 --out-dir "$work/single" > "$work/single.log"
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --steps 4 --batch 3 --out-dir "$work/np2" > "$work/np2.log"
"${mpirun[@]}" -np 3 "$train" "${common[@]}" --steps 4 --batch 2 --out-dir "$work/np3" > "$work/np3.log"
# ZeRO-1 (2 ranks) and overlapped buckets (3 ranks, 64 KiB: several buckets) on the same
# global batch (test_mpi_zero covers both at 2 and 3 ranks)
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --steps 4 --batch 3 --zero1 1 --out-dir "$work/zero2" \
  > "$work/zero2.log"
"${mpirun[@]}" -np 3 "$train" "${common[@]}" --steps 4 --batch 2 --overlap 0.0625 --out-dir "$work/ovl3" \
  > "$work/ovl3.log"

losses() { grep -o '"\(train\|val\)_loss": [0-9.]*' "$1/metrics.jsonl" | sed 's/.*: //'; }
for run in np2 np3 zero2 ovl3; do
  # same number of values, each within 2e-5 of the single process
  np=${run: -1}
  if ! paste <(losses "$work/single") <(losses "$work/$run") | awk '
      NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5) bad = 1; n++ }
      END { exit bad || n < 7 }'; then
    echo "losses of $run differ from one process:"
    paste <(losses "$work/single") <(losses "$work/$run")
    exit 1
  fi
  log="$work/$run.log"
  [ "$(grep -c '^gptx-train ' "$log")" -eq 1 ] || { echo "np$np: header not printed once"; exit 1; }
  grep -q "^data parallel: $np ranks (mpi engine" "$log"
  grep -q 'step 4/4 | loss (global) ' "$log"
  grep -q 'val loss (global) ' "$log"
  grep -q 'tok/s (global, avg of training steps)' "$log"
  [ "$(grep -c 'sample: ' "$log")" -eq 1 ] || { echo "np$np: sample not printed once"; exit 1; }
  echo "ok: $run matches one process"
done
grep -q 'ZeRO-1: optimizer state sharded' "$work/zero2.log"
grep -q 'gradient buckets overlapped' "$work/ovl3.log"
paste <(losses "$work/single") <(losses "$work/np2") <(losses "$work/np3") \
  <(losses "$work/zero2") <(losses "$work/ovl3")

# checkpoint at step 2 by rank 0, resumed by both ranks: steps 3-4 as uninterrupted
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --batch 3 --steps 2 --checkpoint-every 2 \
  --out-dir "$work/part" > "$work/part1.log"
[ "$(grep -c '| checkpoint ' "$work/part1.log")" -eq 1 ]
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --steps 4 --batch 3 \
  --resume "$work/part" --out-dir "$work/part2" > "$work/part2.log"
want=$(grep -o '"train_loss": [0-9.]*' "$work/np2/metrics.jsonl" | tail -n 2)
got=$(grep -o '"train_loss": [0-9.]*' "$work/part2/metrics.jsonl")
if [ "$want" != "$got" ]; then
  echo "resumed losses differ:"; echo "$want"; echo "---"; echo "$got"; exit 1
fi
echo "ok: resume under mpirun"

# ZeRO-1: the checkpoint (moments gathered, rank 0 writes) resumes to the same losses
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --batch 3 --steps 2 --checkpoint-every 2 --zero1 1 \
  --out-dir "$work/zpart" > "$work/zpart1.log"
"${mpirun[@]}" -np 2 "$train" "${common[@]}" --steps 4 --batch 3 --zero1 1 \
  --resume "$work/zpart" --out-dir "$work/zpart2" > "$work/zpart2.log"
want=$(grep -o '"train_loss": [0-9.]*' "$work/zero2/metrics.jsonl" | tail -n 2)
got=$(grep -o '"train_loss": [0-9.]*' "$work/zpart2/metrics.jsonl")
if [ "$want" != "$got" ]; then
  echo "ZeRO-1 resumed losses differ:"; echo "$want"; echo "---"; echo "$got"; exit 1
fi
echo "ok: ZeRO-1 checkpoint resume under mpirun"

# a loss that is not finite on one rank only (rank 1's wte poisoned before step 3): every
# rank stops at that step within seconds (no collective left waiting for the comm
# timeout), exit 1, nothing written after the step-2 checkpoint
for mode in plain overlap zero1; do # the step's collectives differ in each
  case $mode in plain) extra=();; overlap) extra=(--overlap 0.0625);; zero1) extra=(--zero1 1);; esac
  start=$(date +%s)
  set +e
  GPTX_TRAIN_TEST_POISON_STEP=3 GPTX_TRAIN_TEST_POISON_RANK=1 "${mpirun[@]}" -np 2 "$train" \
    "${common[@]}" --steps 4 --batch 3 --checkpoint-every 2 --comm-timeout 60 "${extra[@]}" \
    --out-dir "$work/nan_$mode" > "$work/nan_$mode.log" 2> "$work/nan_$mode.err"
  rc=$?
  set -e
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ] || [ "$took" -ge 30 ] ||
     ! grep -q 'rank 1 of 2): the training loss at step 3 is nan' "$work/nan_$mode.err" ||
     ! grep -q 'rank 0 of 2): the training loss of another rank at step 3 is not finite' "$work/nan_$mode.err" ||
     ! grep -q '"type": "warning", "step": 3' "$work/nan_$mode/metrics.jsonl" ||
     [ -e "$work/nan_$mode/model.safetensors" ]; then
    echo "non-finite loss on rank 1 ($mode): rc $rc after $took s"; cat "$work/nan_$mode.err"; exit 1
  fi
  echo "ok: non-finite loss on rank 1 ($mode) -> both ranks stop at step 3 in $took s, exit $rc"
done

# torchrun-style variables with a CPU context: a clear error, no hang
set +e
msg=$(WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 timeout 60 "$train" \
      "${common[@]}" --steps 4 --out-dir "$work/torchrun" 2>&1 >/dev/null)
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -q 'mpirun -np 2' <<<"$msg"; then
  echo "torchrun-style launch on CPU: rc $rc, message: $msg"; exit 1
fi
echo "ok: torchrun-style on CPU -> $(echo "$msg" | grep -m1 mpirun)"
echo "train_dp: all checks passed"
