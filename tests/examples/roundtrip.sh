#!/usr/bin/env bash
# The round trip of docs/export.md: a model trained by gptx, exported, read
# by transformers and by llm.c's own train_gpt2.c, trained further there and
# brought back; nanoGPT's checkpoint through its one command; and the
# tokenizers. What transformers, llm.c and PyTorch computed is in
# tests/examples/data/roundtrip/ (tests/examples/roundtrip/gen_roundtrip.py,
# once, outside CI; versions.txt); gptx is checked against it here:
#   - gptx-export of the model writes the very files transformers and llm.c
#     read (sha256);
#   - the model, its exports, and the models transformers and llm.c
#     continued: gptx's logits within 1e-4, loss within 2e-5, the same
#     greedy tokens (roundtrip_check);
#   - gptx's ids of the bundled texts are transformers' (GPT-2's BPE and the
#     small one), and gptx's bytes of them what llm.c's tokenizer decoded
#     through the gpt2_tokenizer.bin gptx-export writes;
#   - training goes on in gptx from what transformers and llm.c wrote.
# usage: roundtrip.sh BIN_DIR ROUNDTRIP_CHECK DATA_DIR WORK_DIR
set -euo pipefail
bin=$1 check=$2 data=$3 work=$4
fx=$(cd "$(dirname "$0")" && pwd)/data/roundtrip
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck disable=SC1091
. "$fx/expect.env"
enc=$fx/tokenizer/encoder.json voc=$fx/tokenizer/vocab.bpe
a=$fx/gptx_model.safetensors
sha() { sha256sum "$1" | cut -d' ' -f1; }

# 1. gptx -> the files transformers and llm.c read, byte for byte
mkdir -p a_llmc g
"$bin/gptx-export" --model "$a" --format hf --out a_hf --encoder "$enc" --vocab "$voc" > /dev/null
"$bin/gptx-export" --model "$a" --format llmc --out a_llmc/model.bin --encoder "$enc" --vocab "$voc" > /dev/null
"$bin/gptx-export" --model "$a" --format llmc --out g/model.bin > /dev/null 2>&1
[ "$(sha a_hf/model.safetensors)" = "$A_HF_SHA256" ] || fail "the Hugging Face export is not what transformers read"
[ "$(sha a_llmc/model.bin)" = "$A_LLMC_SHA256" ] || fail "the llm.c export is not what llm.c read"
[ "$(sha a_llmc/gpt2_tokenizer.bin)" = "$A_LLMC_TOKENIZER_SHA256" ] || fail "the llm.c tokenizer (small BPE) differs"
[ "$(sha g/gpt2_tokenizer.bin)" = "$GPT2_LLMC_TOKENIZER_SHA256" ] || fail "the llm.c tokenizer (GPT-2) differs"
echo "ok: gptx-export writes the files transformers and llm.c read (sha256)"

# 2. logits, loss, greedy tokens: gptx against transformers and llm.c
"$check" model "$a" "$fx/a_hf"                            # the model vs transformers on its export
"$check" model a_hf "$fx/a_hf"                            # gptx reading its own export
"$check" model "$a" "$fx/a_llmc"                          # the model vs llm.c on its export
"$check" model "$fx/hf_continued" "$fx/hf_continued"      # back from transformers
"$check" model "$fx/llmc_continued.bin" "$fx/llmc_continued" # back from llm.c
"$check" model "$fx/nanogpt" "$fx/nanogpt_tanh"           # nanoGPT's ckpt.pt, its one command

# 3. tokenizers: transformers' ids, llm.c's bytes
gpt2=("$data/gpt2/encoder.json" "$data/gpt2/vocab.bpe")
"$check" ids "$enc" "$voc" "$data/the-verdict.txt" "$SMALL_VERDICT_IDS" "$SMALL_VERDICT_FNV"
for t in the-verdict tinyshakespeare middlemarch; do
  k=$(tr 'a-z-' 'A-Z_' <<< "$t")
  n=GPT2_${k}_IDS f=GPT2_${k}_FNV d=LLMC_${k}_DECODE_FNV
  "$check" ids "${gpt2[@]}" "$data/$t.txt" "${!n}" "${!f}"
  "$check" decode "${gpt2[@]}" "$data/$t.txt" "${!d}"
done

# 4. and on in gptx: a run from each model the others wrote
for m in "$fx/hf_continued" "$fx/llmc_continued.bin"; do
  "$bin/gptx-train" --init-from "$m" --text "$data/the-verdict.txt" --encoder "$enc" --vocab "$voc" \
    --vocab-size 1000 --padded-vocab 1024 --context 64 --batch 2 --steps 2 --eval-every 0 \
    --sample-tokens 0 --threads 2 --out-dir "run_$(basename "$m")" > train.log ||
    { cat train.log; fail "gptx-train --init-from $m"; }
  grep -q '^final: train loss' train.log || fail "gptx-train --init-from $m: no final loss"
done
echo "ok: gptx trains on from the models transformers and llm.c wrote"
echo "roundtrip: all checks passed ($(tr '\n' ' ' < "$fx/versions.txt"))"
