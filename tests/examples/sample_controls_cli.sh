#!/usr/bin/env bash
# gptx-generate's sampling controls on a freshly trained tiny model:
# --num-samples N prints N continuations, each after its own
# "=== sample I of N (--seed S --stream T) ===" line, and each of them is
# printed again, byte for byte, by --seed S --stream T alone; one sample
# prints no such line; the penalties left at their off values change nothing;
# greedy with a penalty is deterministic and differs from greedy without;
# bad values are refused with exit 2 and a message.
set -euo pipefail
train=$1 generate=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$train" --steps 20 --eval-every 20 --sample-tokens 0 --checkpoint-every 0 --threads 2 --batch 4 \
  --out-dir "$work/run" > "$work/train.log"
model="$work/run/checkpoint-00000020.safetensors"
[ -s "$model" ] || { echo "no checkpoint written"; exit 1; }
common=(--model "$model" --threads 2 --max-tokens 40 --ignore-eot)

# three samples: three headers, stream 5, 6, 7
"$generate" "${common[@]}" --seed 11 --stream 5 --num-samples 3 > "$work/three.txt" 2> "$work/three.err"
for i in 1 2 3; do
  grep -qxF "=== sample $i of 3 (--seed 11 --stream $((4 + i))) ===" "$work/three.txt" ||
    { echo "no header for sample $i:"; cat "$work/three.txt"; exit 1; }
  grep -q "^gptx-generate: sample $i: .* generated" "$work/three.err" ||
    { echo "no speed line for sample $i:"; cat "$work/three.err"; exit 1; }
done
# split: sample i = the lines after its header, up to the blank line before the next
awk -v dir="$work" '/^=== sample [0-9]+ of 3 /{n++; f=dir "/part" n ".txt"; printf "" > f; next}
  n {print > f}' "$work/three.txt"
for i in 1 2; do # the separator: one blank line before the next header
  [ -z "$(tail -n 1 "$work/part$i.txt")" ] || { echo "no blank line after sample $i"; exit 1; }
  head -n -1 "$work/part$i.txt" > "$work/p" && mv "$work/p" "$work/part$i.txt"
done
for i in 1 2 3; do
  "$generate" "${common[@]}" --seed 11 --stream $((4 + i)) > "$work/alone$i.txt" 2> /dev/null
  if ! cmp -s "$work/part$i.txt" "$work/alone$i.txt"; then
    echo "sample $i differs from --seed 11 --stream $((4 + i)) alone:"
    diff "$work/part$i.txt" "$work/alone$i.txt" || true
    exit 1
  fi
  grep -q '===' "$work/alone$i.txt" && { echo "a single sample printed a header"; exit 1; }
done
if cmp -s "$work/part1.txt" "$work/part2.txt" && cmp -s "$work/part2.txt" "$work/part3.txt"; then
  echo "the three samples are the same text: one stream for all"; exit 1
fi
echo "ok: --num-samples 3 = streams 5, 6, 7 alone; $(head -c 70 "$work/part2.txt")..."

# the off values are the defaults: the same bytes
"$generate" "${common[@]}" --seed 3 > "$work/plain.txt" 2> /dev/null
"$generate" "${common[@]}" --seed 3 --repetition-penalty 1 --frequency-penalty 0 \
  --presence-penalty 0 --min-p 0 --penalty-window 5 > "$work/off.txt" 2> /dev/null
cmp -s "$work/plain.txt" "$work/off.txt" || { echo "penalties at their off values changed the text"; exit 1; }
echo "ok: penalties off = no penalties"

# greedy: deterministic with a penalty, and another text than without
g=(--temperature 0)
"$generate" "${common[@]}" "${g[@]}" > "$work/greedy.txt" 2> /dev/null
for flags in "--repetition-penalty 1.8" "--frequency-penalty 2" "--presence-penalty 3"; do
  # shellcheck disable=SC2086
  "$generate" "${common[@]}" "${g[@]}" $flags --seed 1 > "$work/pen1.txt" 2> /dev/null
  # shellcheck disable=SC2086
  "$generate" "${common[@]}" "${g[@]}" $flags --seed 2 > "$work/pen2.txt" 2> /dev/null
  cmp -s "$work/pen1.txt" "$work/pen2.txt" || { echo "greedy $flags: two runs differ"; exit 1; }
  if cmp -s "$work/greedy.txt" "$work/pen1.txt"; then echo "greedy $flags changed nothing"; exit 1; fi
  echo "ok: greedy $flags deterministic, not the plain greedy text"
done
# min-p 1 keeps only the best token: sampling becomes greedy
"$generate" "${common[@]}" --min-p 1 --seed 9 > "$work/minp.txt" 2> /dev/null
cmp -s "$work/greedy.txt" "$work/minp.txt" || { echo "--min-p 1 is not greedy"; exit 1; }
echo "ok: --min-p 1 = greedy"

for bad in "--repetition-penalty 0" "--repetition-penalty -1" "--frequency-penalty -0.5" \
           "--presence-penalty nan" "--min-p 1.5" "--min-p -0.1" "--penalty-window 0" \
           "--num-samples 0" "--num-samples x" "--repetition-penalty"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$generate" --model "$model" $bad 2>&1 >/dev/null); rc=$?
  set -e
  flag=${bad%% *}
  if [ "$rc" -ne 2 ] || [[ "$msg" != *"$flag"* ]]; then
    echo "'$bad' should fail with exit 2 and a message naming $flag (rc=$rc: $msg)"; exit 1
  fi
  echo "ok: '$bad' -> rc $rc: $msg"
done
