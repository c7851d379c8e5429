#!/usr/bin/env bash
# What gptx-train writes for the user is never lost or torn:
#   - a resumed run in the same folder keeps the rows up to its step, drops
#     the later ones of the run that stopped, appends, and plots the whole run;
#   - every metrics row is flushed: after kill -9 the file has every step the
#     run printed and ends in a whole line;
#   - a full disk (a file size limit) or an unwritable plot is an error
#     naming the file, exit status 1; metrics.jsonl a link to a device is another
#     run's file (--overwrite replaces the link);
#   - a second trainer on a folder in use is refused, naming the owner, even
#     after its lock file is deleted (the folder itself is locked); a run whose
#     folder is replaced, or whose lock file (the fallback where folders
#     cannot be locked) is deleted, stops at once, its records whole;
#   - a diverging loss is warned once (log and metrics); a loss that is not
#     finite stops the run without writing over the last checkpoint;
#   - a new run in a folder with another run's files is refused unless
#     --overwrite, and an old checkpoint resumed there keeps consistent
#     records;
#   - --text must be a regular file, and not given with --train-shards;
#     integer flags say their range; an unknown flag given last is "unknown";
#     tokens/step does not overflow.
set -euo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"
micro=(--preset micro --threads 2 --sample-tokens 0)

# ---- resume in the same folder ----------------------------------------------------
# (warm-up past the last step: the lr of a step does not depend on --steps)
w=(--warmup 20 --eval-every 4)
"$train" "${micro[@]}" "${w[@]}" --steps 6 --checkpoint-every 6 --out-dir run > a.log
cp run/checkpoint-00000006.safetensors ckpt6.safetensors
"$train" --resume run --steps 12 > b.log # on to 12, appending
"$train" "${micro[@]}" "${w[@]}" --steps 12 --out-dir ref > /dev/null
# the run then "lost" its last 6 steps (only the step-6 checkpoint is left): resuming it again in
# the same folder must drop the rows past step 6 before appending the new ones
"$train" --resume ckpt6.safetensors --steps 12 --out-dir run > c.log
rows() { local n; n=$(grep -c "\"type\": \"$1\"" "$2" 2> /dev/null) || true; echo "${n:-0}"; }
[ "$(rows train run/metrics.jsonl)" -eq 12 ] || { echo "train rows after resume: $(rows train run/metrics.jsonl), want 12"; exit 1; }
[ "$(rows config run/metrics.jsonl)" -eq 3 ] || { echo "want 3 config records (run, 2 resumes)"; exit 1; }
# steps 1..12 once each, in order, and the same losses as the uninterrupted run
steps=$(grep '"type": "train"' run/metrics.jsonl | sed 's/.*"step": \([0-9]*\),.*/\1/' | tr '\n' ' ')
[ "$steps" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] || { echo "steps after resume: $steps"; exit 1; }
losses() { grep -o '"train_loss": [0-9.]*' "$1"; }
[ "$(losses run/metrics.jsonl)" = "$(losses ref/metrics.jsonl)" ] || { echo "resumed losses differ"; exit 1; }
vals=$(grep '"type": "val"' run/metrics.jsonl | sed 's/.*"step": \([0-9]*\),.*/\1/' | tr '\n' ' ')
[ "$vals" = "0 4 8 12 " ] || { echo "val steps after resume: $vals"; exit 1; }
# the plot shows the whole run: 12 train points from step 1, the 4 val dots
grep -q '<svg' run/loss.svg
[ "$(grep -c '<circle' run/loss.svg)" -eq 4 ] || { echo "val dots in the plot: $(grep -c '<circle' run/loss.svg)"; exit 1; }
pts=$(grep -m1 -o 'points="[^"]*"' run/loss.svg | tr -cd , | wc -c)
[ "$pts" -eq 12 ] || { echo "train points in the plot: $pts, want 12"; exit 1; }
echo "ok: resume in the same folder: 12 train rows once each, vals 0 4 8 12, plot of the whole run"

# ---- flushed rows survive kill -9 --------------------------------------------------
"$train" "${micro[@]}" --steps 100000 --eval-every 0 --log-every 1 --out-dir killed > k.log 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ "$(grep -c '^step [0-9]*/' k.log 2>/dev/null || true)" -ge 8 ] && break
  sleep 0.1
done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
printed=$(grep -c '^step [0-9]*/' k.log)
have=$(rows train killed/metrics.jsonl)
[ "$have" -ge "$printed" ] || { echo "kill -9: $have rows for $printed printed steps"; exit 1; }
[ -z "$(tail -c 1 killed/metrics.jsonl)" ] || { echo "kill -9 left a torn last row"; exit 1; }
echo "ok: kill -9 after $printed printed steps: $have whole rows"

# ---- a full disk, an unwritable plot ------------------------------------------------
# a full disk: a file size limit of 2 KiB (SIGXFSZ ignored, so writes past it
# fail) lets the config row in and not the train rows after it
mkdir -p full
set +e
( trap '' XFSZ; ulimit -f 2; exec "$train" "${micro[@]}" --steps 3 --checkpoint-every 0 \
    --out-dir full ) > /dev/null 2> full.err; rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "cannot write full/metrics.jsonl: File too large" full.err ||
  { echo "full disk: rc $rc"; cat full.err; exit 1; }
echo "ok: full disk -> rc 1: $(head -n 1 full.err)"
# metrics.jsonl a link to a device: not the run's own file (issue 34, item 2). A new run
# refuses it as another run's, naming it; --overwrite removes the link itself, never
# writing through it, and the run writes its own metrics.jsonl
if [ -w /dev/full ]; then
  mkdir -p dev && ln -sf /dev/full dev/metrics.jsonl
  set +e; "$train" "${micro[@]}" --steps 3 --out-dir dev > /dev/null 2> dev.err; rc=$?; set -e
  [ "$rc" -eq 1 ] && grep -q "dev holds another run's files (metrics.jsonl)" dev.err && [ -L dev/metrics.jsonl ] ||
    { echo "metrics a link to a device: rc $rc"; cat dev.err; exit 1; }
  "$train" "${micro[@]}" --steps 3 --out-dir dev --overwrite > /dev/null
  [ -f dev/metrics.jsonl ] && [ ! -L dev/metrics.jsonl ] && [ "$(rows train dev/metrics.jsonl)" -eq 3 ] ||
    { echo "--overwrite: metrics.jsonl is not the run's own file of 3 rows"; ls -l dev; exit 1; }
  echo "ok: metrics.jsonl a link to /dev/full -> rc 1: $(head -n 1 dev.err); --overwrite replaces the link"
fi
# the plot's path taken by a folder (on a resume: a new run would be refused for it):
# refused before the first step, not after the training
"$train" "${micro[@]}" --steps 2 --checkpoint-every 2 --out-dir plot > /dev/null
rm plot/loss.svg && mkdir plot/loss.svg
set +e; "$train" --resume plot --steps 3 > plot.log 2> plot.err; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "its loss.svg is a directory, not a regular file" plot.err ||
  { echo "plot: rc $rc"; cat plot.err; exit 1; }
[ -d plot/loss.svg ] || { echo "the folder loss.svg was replaced"; exit 1; }
! grep -q '"step": 3' plot/metrics.jsonl || { echo "the run trained before refusing"; exit 1; }
echo "ok: unwritable plot -> rc 1: $(head -n 1 plot.err)"

# ---- one run per folder, whatever happens to the lock -------------------------------------
# A metrics file is whole when every line is one JSON object of a known type, it holds
# no NUL byte, and its train rows count 1, 2, 3, ... in order.
whole() { # metrics file
  local f=$1 bad steps want
  bad=$(LC_ALL=C grep -a -c -v '^{"type": "\(config\|train\|val\|warning\)", .*}$' "$f" || true)
  [ "$bad" -eq 0 ] && [ "$(tr -d '\000' < "$f" | wc -c)" -eq "$(wc -c < "$f")" ] ||
    { echo "$f: $bad lines that are not whole records, or NUL bytes"; return 1; }
  steps=$(grep '"type": "train"' "$f" | sed 's/.*"step": \([0-9]*\),.*/\1/' | tr '\n' ' ')
  want=$(seq -s ' ' 1 "$(rows train "$f")")
  [ "$steps" = "$want " ] || { echo "$f: train steps '$steps'"; return 1; }
}
start_slow() { # dir: a long run in the background (pid in $pid), once it wrote 2 rows
  "$train" --preset micro --sample-tokens 0 --threads 1 --steps 100000 --eval-every 0 --log-every 1 --out-dir "$1" \
    > "$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do [ "$(rows train "$1/metrics.jsonl" 2> /dev/null)" -ge 2 ] && break; sleep 0.1; done
}
finish() { # waits for $pid (at most 60 s: a run that should stop but goes on fails the
  # test instead of hanging it); its exit status in $rc_a
  for _ in $(seq 600); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2> /dev/null; then kill -9 "$pid"; echo "pid $pid still ran after 60 s"; fi
  set +e; wait "$pid"; rc_a=$?; set -e
}
second() { # dir [flags]: a second trainer on it, --overwrite (the boldest); its message in $msg
  local d=$1; shift
  set +e; msg=$("$train" "${micro[@]}" --steps 2 --out-dir "$d" --overwrite "$@" 2>&1 >/dev/null); rc=$?; set -e
}
# the folder itself is locked: deleting .gptx-train.lock (the lock file of older
# versions) frees nothing, the second trainer is refused naming the first
start_slow busy
rm -f busy/.gptx-train.lock
second busy
kill -INT "$pid" 2> /dev/null || true; set +e; wait "$pid"; rc_a=$?; set -e
[ "$rc" -ne 0 ] && [[ "$msg" == *"in use by another gptx-train (pid $pid)"* ]] ||
  { echo "second trainer on busy/: rc $rc: $msg"; exit 1; }
[ "$rc_a" -eq 130 ] && [ -s busy/model.safetensors ] && whole busy/metrics.jsonl ||
  { echo "the first run after the refusal: rc $rc_a"; cat busy.log; exit 1; }
echo "ok: lock file deleted, second trainer still refused: ${msg:0:100}; the first run's records whole"
# the folder moved away and another put in its place: the run stops at once and writes
# nothing into the new folder (nor more into its own)
start_slow moved
mv moved moved.away && mkdir moved
finish
[ "$rc_a" -eq 1 ] && grep -q "moved: the folder was removed or replaced while this run held it" moved.log ||
  { echo "folder replaced under the run: rc $rc_a"; cat moved.log; exit 1; }
[ -z "$(ls -A moved)" ] && whole moved.away/metrics.jsonl && [ ! -e moved.away/model.safetensors ] ||
  { echo "after the folder was replaced: $(ls -A moved moved.away)"; exit 1; }
echo "ok: folder replaced under the run -> exit 1 at once, nothing written to either folder"
# where folders cannot be locked (NFS) the lock is .gptx-train.lock: it holds while it
# is there, and a run whose lock file is deleted stops before its next write
export GPTX_TRAIN_TEST_LOCK=file
start_slow lockfile
second lockfile
[ "$rc" -ne 0 ] && [[ "$msg" == *"in use by another gptx-train (pid $pid)"* ]] ||
  { echo "lock file: second trainer: rc $rc: $msg"; exit 1; }
rm lockfile/.gptx-train.lock
finish
unset GPTX_TRAIN_TEST_LOCK
[ "$rc_a" -eq 1 ] && grep -q "its lock file .gptx-train.lock was removed or replaced" lockfile.log &&
  whole lockfile/metrics.jsonl || { echo "lock file deleted: rc $rc_a"; cat lockfile.log; exit 1; }
echo "ok: lock file: second trainer refused; lock file deleted -> the run stops, records whole"

# ---- a new run does not take over another run's folder -----------------------------------
"$train" "${micro[@]}" "${w[@]}" --steps 10 --checkpoint-every 10 --out-dir used > /dev/null
cp used/checkpoint-00000010.safetensors ck10.safetensors
cp used/metrics.jsonl used10.jsonl
set +e; msg=$("$train" "${micro[@]}" --steps 3 --out-dir used 2>&1 >/dev/null); rc=$?; set -e
want="used holds another run's files (metrics.jsonl, model.safetensors, loss.svg, latest, checkpoint-00000010.safetensors)"
[ "$rc" -ne 0 ] && [[ "$msg" == *"$want"*"--overwrite"*"--resume used to continue that run"* ]] ||
  { echo "new run in used/: rc $rc: $msg"; exit 1; }
cmp -s used/metrics.jsonl used10.jsonl || { echo "the refused run changed used/metrics.jsonl"; exit 1; }
echo "ok: a new run in a used folder is refused: ${msg:0:150}"
# the old run's checkpoint then resumes there with consistent records: steps 1..12 once,
# the losses of the uninterrupted 12 steps
"$train" --resume ck10.safetensors --steps 12 --out-dir used > /dev/null
whole used/metrics.jsonl && [ "$(rows train used/metrics.jsonl)" -eq 12 ] &&
  [ "$(losses used/metrics.jsonl)" = "$(losses ref/metrics.jsonl)" ] ||
  { echo "resume after the refused run: records not the run's 12 steps"; exit 1; }
echo "ok: after the refusal, --resume of the old checkpoint: steps 1..12 once, the reference losses"
# --overwrite: the new run replaces them all (no checkpoint of the old run is left)
"$train" "${micro[@]}" --steps 3 --eval-every 0 --out-dir used --overwrite > ow.log
grep -q "^--overwrite: removed the other run's files from used" ow.log &&
  [ "$(rows train used/metrics.jsonl)" -eq 3 ] && [ "$(rows config used/metrics.jsonl)" -eq 1 ] &&
  [ ! -e used/checkpoint-00000010.safetensors ] && [ ! -e used/latest ] || { echo "--overwrite"; cat ow.log; ls used; exit 1; }
# and the old checkpoint no longer resumes into that folder: the records would mix two runs
set +e; msg=$("$train" --resume ck10.safetensors --steps 12 --out-dir used 2>&1 >/dev/null); rc=$?; set -e
[ "$rc" -ne 0 ] && [[ "$msg" == *"used holds another run's files (metrics.jsonl): this run would mix its records with them"* ]] ||
  { echo "resume into another run's folder: rc $rc: $msg"; exit 1; }
# unless --overwrite: that run's records start anew at the resumed step
"$train" --resume ck10.safetensors --steps 12 --out-dir used --overwrite > /dev/null
steps=$(grep '"type": "train"' used/metrics.jsonl | sed 's/.*"step": \([0-9]*\),.*/\1/' | tr '\n' ' ')
[ "$steps" = "11 12 " ] && [ "$(rows config used/metrics.jsonl)" -eq 1 ] ||
  { echo "--resume --overwrite: steps '$steps'"; exit 1; }
echo "ok: --overwrite replaces another run's files; resuming into another run's folder needs it too"

# ---- the loss's health ----------------------------------------------------------------------
# lr 10 diverges at once (10.8 -> 255 at step 2): one warning, in the log and the metrics,
# at that step; kept (not repeated) when the run is resumed after it, dropped and said again
# when resumed from before it
hot=("${micro[@]}" --lr 10 --eval-every 0 --log-every 1)
warnings() { grep '"type": "warning"' "$1" | sed 's/.*"step": \([0-9]*\),.*/\1/' | tr '\n' ' '; }
"$train" "${hot[@]}" --steps 1 --checkpoint-every 1 --out-dir hot > /dev/null
cp hot/checkpoint-00000001.safetensors hot1.safetensors
"$train" --resume hot1.safetensors --steps 4 --checkpoint-every 4 --out-dir hot > hot4.log
cp hot/checkpoint-00000004.safetensors hot4.safetensors
"$train" --resume hot4.safetensors --steps 8 --out-dir hot > hot8.log
climb='^step 2 | warning: the loss [0-9.]* is more than twice the [0-9.]* the run started from'
[ "$(warnings hot/metrics.jsonl)" = "2 " ] && grep -q "$climb" hot4.log &&
  ! grep -q warning hot8.log || { echo "lr 10: warnings at steps '$(warnings hot/metrics.jsonl)'"; cat hot4.log hot8.log; exit 1; }
"$train" --resume hot1.safetensors --steps 8 --out-dir hot > /dev/null
after=$(grep -B1 '"type": "warning"' hot/metrics.jsonl | head -n 1)
[ "$(warnings hot/metrics.jsonl)" = "2 " ] && whole hot/metrics.jsonl &&
  [[ "$after" == '{"type": "train", "step": 2, '* ]] ||
  { echo "lr 10 resumed from step 1: warnings at steps '$(warnings hot/metrics.jsonl)'"; exit 1; }
[ "$(warnings run/metrics.jsonl)" = "" ] || { echo "a run that learns got warnings"; exit 1; }
# lr 0.3 wobbles (up to 1.6 times the start, 10.8 -> 17.0 at step 5) but is not diverging
"$train" "${micro[@]}" --lr 0.3 --eval-every 0 --steps 8 --out-dir wobble > /dev/null
[ "$(warnings wobble/metrics.jsonl)" = "" ] ||
  { echo "lr 0.3 (a loss up to 1.6 times its start) warned"; cat wobble/metrics.jsonl; exit 1; }
# lr 1 climbs to 2.9 times its start by step 4 (10.8 -> 31.5): warned (the threshold from above)
"$train" "${micro[@]}" --lr 1 --eval-every 0 --steps 4 --out-dir climb > /dev/null
grep -q '"type": "warning"' climb/metrics.jsonl ||
  { echo "lr 1 (2.9 times the start by step 4) not warned"; cat climb/metrics.jsonl; exit 1; }
echo "ok: lr 10 -> one warning at step 2 (log and metrics), once also across resumes; lr 1 (2.9x) warned, lr 0.3 (1.6x) not"
# a loss that is not finite (wte poisoned before step 5, through the library's own check):
# the run stops at that step, warns, and writes no checkpoint, model or plot; the step-3
# checkpoint stays, and resumes. On shards without validation data, so that no evaluation
# of the broken model stops the run before a save would
perl -e 'print pack("l<256", 20240520, 1, 2000, (0) x 253); print pack("S<*", map { ($_ * 7919) % 50257 } 1 .. 2000)' > ids.bin
set +e
GPTX_TRAIN_TEST_POISON_STEP=5 "$train" "${micro[@]}" --train-shards ids.bin --steps 8 \
  --checkpoint-every 3 --eval-every 0 --out-dir nan > nan.log 2> nan.err
rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "the training loss at step 5 is nan (not finite): the run stops here" nan.err ||
  { echo "non-finite loss: rc $rc"; cat nan.log nan.err; exit 1; }
[ "$(warnings nan/metrics.jsonl)" = "5 " ] && grep -q '"type": "warning", "step": 5, "train_loss": null' nan/metrics.jsonl &&
  whole nan/metrics.jsonl && [ "$(rows train nan/metrics.jsonl)" -eq 4 ] ||
  { echo "non-finite loss: metrics"; cat nan/metrics.jsonl; exit 1; }
[ ! -e nan/model.safetensors ] && [ ! -e nan/loss.svg ] || { echo "non-finite loss: wrote $(ls nan)"; exit 1; }
"$train" --resume nan --steps 4 --out-dir nan > nan4.log
grep -q 'resumed from nan/checkpoint-00000003.safetensors at step 3' nan4.log ||
  { echo "the checkpoint after the non-finite loss is not step 3's"; cat nan4.log; exit 1; }
echo "ok: non-finite loss at step 5 -> exit 1, warned, nothing written; the step-3 checkpoint resumes"
# a finite loss whose gradient norm overflows (the gradients scaled by 3e38 at step 5)
set +e
GPTX_TRAIN_TEST_POISON_STEP=5 GPTX_TRAIN_TEST_POISON_WHAT=grad "$train" "${micro[@]}" \
  --train-shards ids.bin --steps 8 --checkpoint-every 3 --eval-every 0 --out-dir gnan > gnan.log \
  2> gnan.err
rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "the gradient norm at step 5 is inf (not finite; the loss was [0-9.]*): the run stops here" gnan.err &&
  [ "$(warnings gnan/metrics.jsonl)" = "5 " ] && [ "$(rows train gnan/metrics.jsonl)" -eq 4 ] &&
  [ ! -e gnan/model.safetensors ] ||
  { echo "non-finite gradient norm: rc $rc"; cat gnan.err; cat gnan/metrics.jsonl; ls gnan; exit 1; }
"$train" --resume gnan --steps 4 --out-dir gnan > gnan4.log
grep -q 'at step 3' gnan4.log || { echo "the checkpoint after the overflow is not step 3's"; exit 1; }
echo "ok: gradient norm inf at step 5 (loss finite) -> exit 1, warned, the step-3 checkpoint kept"

# ---- flags and inputs ------------------------------------------------------------------
fails() { # expected-message args...
  local want=$1; shift
  set +e; msg=$("$train" "$@" --out-dir bad 2>&1 >/dev/null); rc=$?; set -e
  [ "$rc" -ne 0 ] && case "$msg" in *"$want"*) true;; *) false;; esac ||
    { echo "'$*': rc $rc, expected '$want' in: $msg"; exit 1; }
  echo "ok: '$*' -> rc $rc: ${msg:0:110}"
}
mkdir -p adir
fails "the folder holds no regular file" --text adir # a folder is its files; an empty one is refused
fails "not a regular file" --text /dev/zero
fails "expected an integer from 1 to 1000000000" --batch 2000000000
fails "unknown option" --steps 3 --nope
# the exit code says whose fault it is: 2 a command line the table refuses, 1 an input
# that cannot be used (also a missing file, for --resume as for --init-from)
code() { # want-rc expected-message args...
  local want_rc=$1 want=$2; shift 2
  set +e; msg=$("$train" "$@" --out-dir bad 2>&1 >/dev/null); rc=$?; set -e
  [ "$rc" -eq "$want_rc" ] && [[ "$msg" == *"$want"* ]] ||
    { echo "'$*': rc $rc (want $want_rc), expected '$want' in: $msg"; exit 1; }
  echo "ok: '$*' -> rc $rc: ${msg:0:110}"
}
code 2 "--lr 0: expected a number in (0, 10]" --lr 0
code 2 "--top-p 0: expected a number in (0, 1]" --top-p 0
code 2 "--keep-checkpoints -1: expected an integer from 0 to 1000000000" --keep-checkpoints -1
code 2 "--stpes: unknown option; did you mean --steps?" --stpes 3
code 1 "--resume nosuch: No such file or directory" --resume nosuch
code 1 "nosuch" --init-from nosuch --steps 1
mkdir -p empty
code 1 "--resume empty: the folder holds no checkpoint" --resume empty
"$train" --help | grep -q "bf16_pure (bf16 weights, moments and activations, fp32 gradients" ||
  { echo "--help: bf16_pure"; exit 1; }
# one data source: a --text given with --train-shards would be ignored (the
# validation loss then nan, exit 0); the preset's own text is not "given"
fails "--text ids.txt: not with --train-shards" --text ids.txt --train-shards ids.bin
fails "--text ids.txt: not with --train-shards" "${micro[@]}" --train-shards ids.bin --text ids.txt
"$train" "${micro[@]}" --train-shards ids.bin --steps 1 --checkpoint-every 1 --out-dir shards > /dev/null
fails "the run trains on --train-shards ids.bin, not on a text" \
  --resume shards/checkpoint-00000001.safetensors --steps 2 --text ids.txt
out=$(timeout 20 "$train" "${micro[@]}" --grad-accum 50000000 --steps 1 --eval-every 0 --out-dir big 2>&1 | head -n 8 || true)
echo "$out" | grep -q "= 6400000000 tokens/step" || { echo "tokens/step: $out"; exit 1; }
echo "ok: --grad-accum 50000000 -> 6400000000 tokens/step"
echo "train_records: all checks passed"
