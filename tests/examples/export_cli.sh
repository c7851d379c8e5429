#!/usr/bin/env bash
# gptx-export end to end on a freshly trained model: gptx -> Hugging Face
# folder -> llm.c fp32 -> Hugging Face again gives the same model.safetensors
# and config.json byte for byte; the tokenizer files are the bundled ones,
# with transformers' tokenizer_config.json (model_max_length the context)
# and llm.c's gpt2_tokenizer.bin; a model of fewer than llm.c's 64
# positions is exported with a warning; a bf16 llm.c file is half the size;
# the command line and the refusals exit 2 and 1 with their messages.
set -euo pipefail
train=$1 export=$2 data=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
"$train" --steps 1 --eval-every 0 --sample-tokens 0 --checkpoint-every 0 --threads 2 --batch 1 \
  --out-dir "$work/run" > "$work/train.log"
model="$work/run/model.safetensors"
[ -s "$model" ] || { echo "no model written"; exit 1; }

fail() { echo "FAIL: $*"; exit 1; }
# expect CODE "message part" command...: the exit code and a line of stderr
expect() {
  local want=$1 text=$2; shift 2
  local rc=0
  "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, expected $want: $(cat "$work/err.txt")"
  grep -qF -- "$text" "$work/err.txt" || fail "$*: stderr lacks '$text': $(cat "$work/err.txt")"
}

"$export" --model "$model" --format hf --out "$work/hf" > "$work/hf.log"
for f in model.safetensors config.json vocab.json merges.txt tokenizer_config.json; do
  [ -s "$work/hf/$f" ] || fail "hf folder lacks $f"
done
cmp -s "$work/hf/vocab.json" "$data/gpt2/encoder.json" || fail "vocab.json is not encoder.json"
cmp -s "$work/hf/merges.txt" "$data/gpt2/vocab.bpe" || fail "merges.txt is not vocab.bpe"
grep -q '"tie_word_embeddings": true' "$work/hf/config.json" || fail "config.json: not tied"
grep -q '"model_type": "gpt2"' "$work/hf/config.json" || fail "config.json: no model_type"
tc="$work/hf/tokenizer_config.json"
grep -q '"model_max_length": 64,' "$tc" || fail "tokenizer_config.json: model_max_length is not the context 64"
grep -q '"eos_token": "<|endoftext|>"' "$tc" || fail "tokenizer_config.json: no eos_token"
grep -q '"50256": {"content": "<|endoftext|>"' "$tc" || fail "tokenizer_config.json: no added token 50256"
grep -q '"tokenizer_class": "GPT2Tokenizer"' "$tc" || fail "tokenizer_config.json: no tokenizer_class"

"$export" --model "$work/hf" --format llmc --out "$work/m.bin" > "$work/llmc.log" 2> "$work/llmc.err"
grep -q "and its tokenizer $work/gpt2_tokenizer.bin" "$work/llmc.log" || fail "llmc: $(cat "$work/llmc.log")"
[ ! -s "$work/llmc.err" ] || fail "llmc export of a 64-position model warned: $(cat "$work/llmc.err")"
# llm.c's tokenizer.h: 256 uint32 (20240328, version 2, vocabulary, EOT), then
# each token as a length byte and its bytes
perl -e '
  local $/; open my $f, "<:raw", $ARGV[0] or die; my $d = <$f>;
  my @h = unpack("V4", $d); my $p = 1024; my @tok;
  die "header @h\n" unless "@h" eq "20240328 2 50257 50256";
  while ($p < length $d) { my $n = ord substr($d, $p, 1); push @tok, substr($d, $p + 1, $n); $p += 1 + $n; }
  die "tokens: " . scalar(@tok) . "\n" unless @tok == 50257 && $p == length $d;
  die "token 0 is \"$tok[0]\"\n" unless $tok[0] eq "!";
  die "token 198 is not a newline\n" unless $tok[198] eq "\n";
  die "token 464 is \"$tok[464]\"\n" unless $tok[464] eq "The";
  die "token 50256 is \"$tok[50256]\"\n" unless $tok[50256] eq "<|endoftext|>";
' "$work/gpt2_tokenizer.bin" || fail "gpt2_tokenizer.bin is not llm.c's tokenizer file"
echo "ok: tokenizer_config.json (model_max_length 64) and gpt2_tokenizer.bin (50257 tokens, EOT 50256)"
"$export" --model "$work/m.bin" --format hf --out "$work/hf2" > /dev/null
cmp "$work/hf/model.safetensors" "$work/hf2/model.safetensors" || fail "hf -> llmc -> hf changed the weights"
cmp "$work/hf/config.json" "$work/hf2/config.json" || fail "hf -> llmc -> hf changed config.json"
"$export" --model "$work/m.bin" --format llmc --dtype bf16 --out "$work/m5.bin" > /dev/null
s3=$(stat -c %s "$work/m.bin") s5=$(stat -c %s "$work/m5.bin")
[ $(( (s3 - 1024) / 2 + 1024 )) = "$s5" ] || fail "bf16 file is $s5 bytes, fp32 $s3"
echo "ok: gptx -> hf -> llmc -> hf byte for byte; bf16 $s5 bytes"

# llm.c's train_gpt2.c runs T = 64: a model of 32 positions is exported with a warning
"$train" --steps 1 --eval-every 0 --sample-tokens 0 --checkpoint-every 0 --threads 2 --batch 1 \
  --context 32 --out-dir "$work/run32" > "$work/train32.log"
expect 0 "the model's context is 32 positions; llm.c's train_gpt2.c runs T = 64" \
  "$export" --model "$work/run32/model.safetensors" --format llmc --out "$work/m32.bin"
echo "ok: a 32-position model exported to llm.c with the warning"

# the command line: exit 2
expect 2 "--out" "$export" --model "$model" --format hf
expect 2 "--format" "$export" --model "$model" --format gguf --out "$work/x"
expect 2 "did you mean --model" "$export" --modle "$model" --format hf --out "$work/x"
expect 2 "--dtype bf16" "$export" --model "$model" --format hf --dtype bf16 --out "$work/x"
# the work fails: exit 1, nothing left behind
expect 1 "nosuch" "$export" --model "$work/nosuch" --format hf --out "$work/x"
expect 1 "not a folder" "$export" --model "$model" --format hf --out "$work/m.bin"
expect 1 "GPT-2 tokenizer" "$export" --model "$model" --format hf --out "$work/x" \
  --encoder "$work/m.bin" --vocab "$data/gpt2/vocab.bpe"
[ ! -e "$work/x" ] || fail "a refused export left $work/x"
"$export" --help | grep -q "usage: gptx-export" || fail "--help"
echo "ok: usage errors exit 2, failures exit 1"
