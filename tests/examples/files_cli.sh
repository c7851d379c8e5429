#!/usr/bin/env bash
# The programs and what is at a path (issue 25, items 6 and 11): a FIFO or a
# device given as a tokenizer file, a model or a Hugging Face config.json is
# refused at once (a 10 s timeout fails a wait or an endless read); llm.c
# shards and state files given as a model are named; a 4,077-character
# --out-dir is refused before training with the whole reason; an unknown flag
# given last is an unknown option; a prompt longer than the window reports the
# prefill of the positions that ran.
set -euo pipefail
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
train="$bin/gptx-train" generate="$bin/gptx-generate" eval="$bin/gptx-eval"
"$train" --steps 2 --eval-every 0 --sample-tokens 0 --checkpoint-every 0 --threads 1 --batch 2 \
  --out-dir "$work/run" > "$work/train.log"
model="$work/run/model.safetensors"
mkfifo "$work/fifo"

# expect RC NEEDLE CMD...: exit RC within 10 s, stderr holding NEEDLE
expect() {
  local want=$1 needle=$2; shift 2
  set +e
  timeout 10 "$@" > /dev/null 2> "$work/err"; local rc=$?
  set -e
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$needle" "$work/err"; then
    echo "FAIL: $* -> rc $rc (want $want), stderr:"; cat "$work/err"; echo "(wanted: $needle)"; exit 1
  fi
  echo "ok: $(echo "${*: -2}" | cut -c1-60) -> rc $rc: $(head -n 1 "$work/err" | cut -c1-160)"
}

expect 1 "'/dev/zero' is a character device" "$generate" --model "$model" --encoder /dev/zero
expect 1 "is a FIFO (named pipe)" "$generate" --model "$model" --encoder "$work/fifo"
expect 1 "is a FIFO (named pipe)" "$eval" --model "$model" --text "$0" --vocab "$work/fifo"
expect 1 "is a FIFO (named pipe)" "$generate" --model "$work/fifo"
expect 1 "'/dev/zero' is a character device" "$generate" --model /dev/zero
# a Hugging Face folder whose config.json is a FIFO, or too large
mkdir "$work/hf" && cp "$model" "$work/hf/model.safetensors"
ln -s ../fifo "$work/hf/config.json"
expect 1 "not a regular file" "$generate" --model "$work/hf"
rm "$work/hf/config.json" && truncate -s 17M "$work/hf/config.json"
expect 1 "over the limit of 16777216" "$generate" --model "$work/hf"

# llm.c's other files as a model
python3 - "$work" <<'PY'
import struct, sys
for name, magic, version in (("shard.bin", 20240520, 1), ("state.bin", 20240327, 3)):
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(struct.pack("<256i", magic, version, 1000, *([0] * 253)) + bytes(2000))
PY
expect 1 "is an llm.c token shard (magic 20240520), not a safetensors file" \
  "$generate" --model "$work/shard.bin"
expect 1 "is an llm.c debug state file (magic 20240327)" "$eval" --model "$work/state.bin" --text "$0"

# a 4,077-character --out-dir: refused before the first step, the message whole
long=$(python3 -c "
import sys
s = sys.argv[1] + '/long'
while len(s) < 4077 - 201: s += '/' + 'd' * 200
print(s + '/' + 'e' * (4077 - len(s) - 1))" "$work")
[ ${#long} -eq 4077 ] || { echo "made a path of ${#long} characters"; exit 1; }
mkdir -p "$long"
expect 1 "(File name too long)" "$train" --steps 2 --threads 1 --out-dir "$long"
grep -qF -- "--out-dir $long is 4077 bytes long" "$work/err" || { echo "path cut"; exit 1; }
[ -z "$(ls -A "$long")" ] || { echo "the run wrote into the long --out-dir"; ls -A "$long"; exit 1; }

# an unknown flag given last; a known one without its value
expect 2 "--bogus: unknown option" "$generate" --model "$model" --bogus
expect 2 "--seed: needs a value" "$generate" --model "$model" --seed
expect 2 "--special-tokens: needs a value" "$generate" --model "$model" --special-tokens

# a prompt far longer than the window (64): the rate is of the positions run
for i in $(seq 20000); do printf 'hello world '; done > "$work/prompt.txt"
expect 0 "the window's last" "$generate" --model "$model" --prompt-file "$work/prompt.txt" \
  --max-tokens 2 --threads 1
line=$(grep prefill "$work/err")
rate=$(sed -E 's/.*run, ([0-9.]+) tokens\/s.*/\1/' <<< "$line")
awk -v r="$rate" 'BEGIN { exit !(r + 0 > 0 && r + 0 < 1e6) }' \
  || { echo "absurd prefill rate: $line"; exit 1; }
echo "ok: $line"

# gptx-train's own records (metrics.jsonl, loss.svg) are files of its folder:
# a link in their place is replaced by the run's own file, its target left
# alone (issue 34, item 2: a run never writes through a link); a FIFO in
# their place is refused before the first step
mkdir "$work/kept"
"$train" --steps 2 --eval-every 0 --sample-tokens 0 --checkpoint-every 2 --threads 1 --batch 2 \
  --out-dir "$work/linked" > /dev/null
for f in metrics.jsonl loss.svg; do
  mv "$work/linked/$f" "$work/kept/$f" && ln -s "../kept/$f" "$work/linked/$f"
done
kept=$(cat "$work/kept/metrics.jsonl" "$work/kept/loss.svg" | md5sum)
"$train" --resume "$work/linked" --steps 4 --out-dir "$work/linked" \
  > /dev/null
for f in metrics.jsonl loss.svg; do
  [ -f "$work/linked/$f" ] && [ ! -L "$work/linked/$f" ] || { echo "the link $f is still a link"; exit 1; }
done
[ "$(cat "$work/kept/metrics.jsonl" "$work/kept/loss.svg" | md5sum)" = "$kept" ] ||
  { echo "the links' targets were written"; exit 1; }
[ "$(grep -c '"type": "train"' "$work/linked/metrics.jsonl")" = 2 ] ||
  { echo "metrics rows: $(grep -c '"type": "train"' "$work/linked/metrics.jsonl"), want steps 3 and 4"; exit 1; }
[ "$(find "$work/kept" "$work/linked" -name '*.tmp*' | wc -l)" = 0 ] || { echo "temp left"; exit 1; }
echo "ok: metrics.jsonl and loss.svg links: replaced by the run's own files, targets unchanged"
rm "$work/linked/loss.svg" && mkfifo "$work/linked/loss.svg"
expect 1 "its loss.svg is a FIFO (named pipe), not a regular file" "$train" \
  --resume "$work/linked" --steps 6 --out-dir "$work/linked"
[ -p "$work/linked/loss.svg" ] || { echo "the FIFO loss.svg was replaced"; exit 1; }
rm "$work/linked/metrics.jsonl" && mkfifo "$work/linked/metrics.jsonl"
expect 1 "its metrics.jsonl is a FIFO (named pipe), not a regular file" "$train" \
  --resume "$work/linked" --steps 6 --out-dir "$work/linked"
