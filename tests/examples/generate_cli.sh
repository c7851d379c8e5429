#!/usr/bin/env bash
# gptx-generate end to end on a freshly trained checkpoint: the key/value
# cache and --no-cache print the same sampled text well past the window (64
# positions for the trainer's tiny model); the speed line names prefill and
# decode; --stop cuts the text right before the stop string; the streamed
# output is valid UTF-8; bad flags fail with a message.
set -euo pipefail
train=$1 generate=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$train" --steps 20 --eval-every 20 --sample-tokens 0 --checkpoint-every 0 --threads 2 --batch 4 \
  --out-dir "$work/run" > "$work/train.log"
model="$work/run/checkpoint-00000020.safetensors"
[ -s "$model" ] || { echo "no checkpoint written"; exit 1; }
common=(--model "$model" --threads 2 --seed 7 --max-tokens 150 --ignore-eot) # sampled: T 0.8, top-k 40

"$generate" "${common[@]}" > "$work/cached.txt" 2> "$work/cached.err"
"$generate" "${common[@]}" --no-cache > "$work/nocache.txt" 2> "$work/nocache.err"
if ! cmp -s "$work/cached.txt" "$work/nocache.txt"; then
  echo "cached and uncached text differ:"; diff "$work/cached.txt" "$work/nocache.txt" || true
  exit 1
fi
grep -q 'prefill .* tokens/s' "$work/cached.err"
grep -q 'decode .* tokens/s' "$work/cached.err"
grep -q 'key/value cache' "$work/cached.err"
grep -q 'no cache' "$work/nocache.err"
grep -q ' slides' "$work/cached.err"
echo "ok: cached = uncached over 150 tokens; $(cat "$work/cached.err")"

if command -v iconv > /dev/null; then
  iconv -f UTF-8 -t UTF-8 "$work/cached.txt" > /dev/null || { echo "output is not valid UTF-8"; exit 1; }
fi

# --stop: 8 bytes from the middle of the continuation, and single bytes (a
# match then starts at the first byte of a new token, right where the
# printed text ends)
full=$(cat "$work/cached.txt")
prompt="Every effort moves you"
cont=${full#"$prompt"}
# and the 2..6 bytes that end at the first comma (a comma is a token of its
# own: one of them is the word token before it and the comma, so all but the
# last byte were already there when the comma came, and must have been held)
before_comma=${cont%%,*}
specs="40:8 40:1 41:1 55:1"
for k in 1 2 3 4 5; do specs="$specs $(( ${#before_comma} - k )):$(( k + 1 ))"; done
for spec in $specs; do
  stop=${cont:${spec%%:*}:${spec##*:}}
  [ -n "$stop" ] || { echo "continuation too short for the --stop check"; exit 1; }
  want="$prompt${cont%%"$stop"*}"
  got=$("$generate" "${common[@]}" --stop "$stop" 2> "$work/stop.err")
  if [ "$got" != "$want" ]; then
    echo "--stop '$stop': got"; printf '%s\n' "$got"; echo "want"; printf '%s\n' "$want"; exit 1
  fi
  grep -q 'stopped at --stop' "$work/stop.err"
  echo "ok: --stop '$stop' cut the text at byte ${#want}"
done

for bad in "--keep x" "--window -3" "--stop" "--nope 1"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$generate" --model "$model" $bad 2>&1 >/dev/null); rc=$?
  set -e
  if [ "$rc" -ne 2 ] || [ -z "$msg" ]; then echo "'$bad' should fail with exit 2 and a message (rc=$rc)"; exit 1; fi
  echo "ok: '$bad' -> rc $rc: $(echo "$msg" | head -n 1)"
done
set +e
msg=$("$generate" --model "$model" --window 100000 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 2 ] && [[ "$msg" == *"--window 100000: must be in [0, 64]"* ]] || { echo "--window 100000: rc $rc, '$msg'"; exit 1; }
echo "ok: --window 100000 -> rc 2: $msg"
