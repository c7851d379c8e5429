#!/usr/bin/env bash
# gptx-eval and the model formats of gptx-eval / gptx-generate, end to end:
# a freshly trained model scores its training text far better than another
# text and than chance; the batch size does not change the loss; perplexity
# is exp(loss); a Hugging Face folder (config.json's n_head,
# tie_word_embeddings) and an llm.c file load in both programs; the prompt
# comes from a file or stdin; bad inputs fail with a message.
set -euo pipefail
train=$1 eval=$2 generate=$3 data=$4 corpus=$5 work=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$train" --steps 60 --eval-every 60 --sample-tokens 0 --threads 2 --out-dir run > train.log
model=run/model.safetensors
[ -s "$model" ] || { echo "gptx-train wrote no $model"; exit 1; }

field() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1"; }
"$eval" --model "$model" --text "$data/the-verdict.txt" --threads 2 --json own.json > own.txt
"$eval" --model "$model" --text "$data/the-verdict.txt" --threads 2 --batch 1 --json own1.json > /dev/null
"$eval" --model "$model" --text "$data/middlemarch.txt" --max-tokens 20000 --threads 2 \
  --json other.json > /dev/null
cat own.txt
own=$(field own.json loss) own1=$(field own1.json loss) other=$(field other.json loss)
ppl=$(field own.json perplexity) predicted=$(field own.json predicted) tokens=$(field own.json tokens)
awk -v a="$own" -v b="$own1" -v o="$other" -v p="$ppl" -v n="$predicted" -v t="$tokens" 'BEGIN {
  chance = log(50257)
  if (n != t - 1) { print "predicted " n " of " t " tokens: every token but the first, once"; exit 1 }
  if ((a - b) > 1e-4 || (b - a) > 1e-4) { print "batch 4 loss " a " != batch 1 loss " b; exit 1 }
  if ((p - exp(a)) > 1e-3 * p || (exp(a) - p) > 1e-3 * p) { print "perplexity " p " != exp(" a ")"; exit 1 }
  if (!(a < chance - 3)) { print "own-text loss " a " not far below chance " chance; exit 1 }
  if (!(a < o - 1)) { print "own-text loss " a " not below another text'"'"'s " o; exit 1 }
  printf "ok: loss %.4f on its training text (batch 1: %.4f), %.4f on middlemarch, chance %.4f\n", a, b, o, chance
}'
"$eval" --model "$model" --text "$data/the-verdict.txt" --seq 8 --threads 2 --json short.json > /dev/null
short=$(field short.json loss)
awk -v a="$own" -v s="$short" 'BEGIN { if (!(s > a)) { print "8-token windows (" s ") should score worse than full ones (" a ")"; exit 1 } }'

# a text whose next token is always determined: a model trained on it must
# predict it almost surely (a loss near 0), which only the right targets give
for i in $(seq 300); do printf 'one two three four five six seven eight '; done > cycle.txt
"$train" --text cycle.txt --steps 80 --eval-every 80 --sample-tokens 0 --threads 2 --out-dir cyc > cyc.log
"$eval" --model cyc/model.safetensors --text cycle.txt --threads 2 --json cyc.json > /dev/null
cyc=$(field cyc.json loss)
val=$(sed -n 's/^final: .*val loss \([0-9.]*\).*/\1/p' cyc.log)
awk -v c="$cyc" -v v="$val" 'BEGIN {
  if (!(c < 1.0)) { print "loss " c " on a text of one repeated cycle: expected < 1"; exit 1 }
  if ((c - v) > 0.1 || (v - c) > 0.1) { print "eval loss " c " far from the trainer'"'"'s val loss " v; exit 1 }
  printf "ok: loss %.4f on the repeated cycle it was trained on (the trainer'"'"'s val loss %.4f)\n", c, v }'

# Hugging Face folder and llm.c file (the fuzz seeds: vocabulary 8, context 4)
printf 'print pack("l<256", 20240520, 1, 50, (0) x 253); print pack("S<*", map { $_ %% 8 } 1 .. 50);' > shard.pl
perl shard.pl > ids.bin
mkdir hf && cp "$corpus/seed_hf_f16.safetensors" hf/model.safetensors
printf '{"n_head": 2, "tie_word_embeddings": false, "layer_norm_epsilon": 1e-05}\n' > hf/config.json
"$eval" --model hf --tokens ids.bin > hf.txt
grep -q 'Hugging Face; 1 layers, width 4, 2 heads' hf.txt
grep -q 'over 49 predicted tokens' hf.txt
"$eval" --model "$corpus/seed_llmc_v3.bin" --tokens ids.bin | grep -q '(llm.c; 1 layers'
"$generate" --model hf --prompt '"#' --max-tokens 4 --ignore-eot > hf_gen.txt 2> hf_gen.err
grep -q 'key/value cache' hf_gen.err
# each program names the format it read (docs/programs.md)
grep -q 'gptx-generate: model hf (Hugging Face; 1 layers, width 4, 2 heads, context 4, vocabulary 8)' hf_gen.err
"$generate" --model "$corpus/seed_llmc_v3.bin" --prompt '!' --max-tokens 4 --ignore-eot > /dev/null 2> llmc_gen.err
grep -q '(llm.c; 1 layers' llmc_gen.err
"$generate" --model "$model" --prompt '!' --max-tokens 2 > /dev/null 2> gptx_gen.err
grep -q "model $model (gptx; 4 layers, width 128" gptx_gen.err
echo "ok: a Hugging Face folder and an llm.c file load in gptx-eval and gptx-generate, each named"

# the prompt from a file and from stdin: the same text as --prompt
printf 'I had always thought' > prompt.txt
"$generate" --model "$model" --prompt 'I had always thought' --max-tokens 12 --seed 3 > a.txt 2> /dev/null
"$generate" --model "$model" --prompt-file prompt.txt --max-tokens 12 --seed 3 > b.txt 2> /dev/null
"$generate" --model "$model" --prompt-file - --max-tokens 12 --seed 3 < prompt.txt > c.txt 2> /dev/null
cmp a.txt b.txt && cmp a.txt c.txt
echo "ok: --prompt-file FILE and - give the --prompt text: $(head -c 80 a.txt)"

expect_fail() { # <what the message must contain> <command...>
  local want=$1; shift
  set +e; msg=$("$@" 2>&1 >/dev/null); rc=$?; set -e
  if [ "$rc" -eq 0 ] || [[ "$msg" != *"$want"* ]]; then
    echo "'$*': rc $rc, message '$msg' (wanted one with '$want')"; exit 1
  fi
  echo "ok: $* -> $msg"
}
# config.json's settings have their JSON types: a string where true/false or a
# number belongs is refused, naming the file and the key, not read as the
# default (the library reads config.json: lib/io/hf_config.c)
printf '{"n_head": 2, "tie_word_embeddings": "yes"}\n' > hf/config.json
expect_fail "hf/config.json': \"tie_word_embeddings\" must be true or false" \
  "$eval" --model hf --tokens ids.bin
printf '{"n_head": 2, "tie_word_embeddings": 1}\n' > hf/config.json
expect_fail '"tie_word_embeddings" must be true or false' "$generate" --model hf
printf '{"n_head": "2", "tie_word_embeddings": false}\n' > hf/config.json
expect_fail '"n_head" must be a whole number in [1, 4096]' "$eval" --model hf --tokens ids.bin
printf '{"n_head": 2, "layer_norm_epsilon": "1e-5", "tie_word_embeddings": false}\n' > hf/config.json
expect_fail '"layer_norm_epsilon" must be a number' "$eval" --model hf --tokens ids.bin
# the folder's parts must agree: config.json's sizes are the weights'
printf '{"n_head": 2, "n_layer": 3, "tie_word_embeddings": false}\n' > hf/config.json
expect_fail "says n_layer 3" "$eval" --model hf --tokens ids.bin
rm hf/config.json
expect_fail "without config.json" "$eval" --model hf --tokens ids.bin
expect_fail "give the file itself" "$eval" --model run --tokens ids.bin
expect_fail "not a regular file" "$eval" --model "$model" --text "$data"
expect_fail "outside the model's vocabulary of 8" "$eval" --model "$corpus/seed_llmc_v3.bin" --text prompt.txt
expect_fail "no model at" "$generate" --model nothing.safetensors
expect_fail "give one of --text, --tokens or --multiple-choice" "$eval" --model "$model"
expect_fail "above the model's context length" "$eval" --model "$model" --text prompt.txt --seq 100000
