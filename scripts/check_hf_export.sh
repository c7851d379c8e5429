#!/usr/bin/env bash
# Outside CI: transformers' GPT2LMHeadModel loads gptx-export's Hugging Face
# folders and its logits equal gptx's within 1e-4 (docs/export.md).
#   scripts/check_hf_export.sh [BUILD_DIR]     (default build)
# From a clone, nothing else needed: the first run makes a venv with PyTorch 2,
# transformers, safetensors and numpy from PyPI (about 1.5 GB with PyPI's
# torch; GPTX_TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the
# smaller CPU-only wheels) at $HF_VENV (default BUILD_DIR/hf-venv) and keeps
# it. PYTHON=/path/to/python uses a Python that has those packages instead.
# Models: gptx-train's tiny preset (tied head, qkv bias; 40 steps), and three
# random small models (untied head, no qkv bias, padded vocabulary).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=${HF_VENV:-$build/hf-venv}
work=${WORK:-/tmp/gptx_check_hf_export}
if [ -z "${PYTHON:-}" ]; then
  if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.gptx-hf-ready" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q ${GPTX_TORCH_INDEX:+--index-url "$GPTX_TORCH_INDEX"} torch
    "$venv/bin/pip" install -q transformers safetensors numpy
    touch "$venv/.gptx-hf-ready"
  fi
  PYTHON=$venv/bin/python
fi
py() { "$PYTHON" "$@"; }
rm -rf "$work" && mkdir -p "$work"
cc -O2 -std=c11 -Iinclude scripts/export_logits.c -L"$build" -lgptx -Wl,-rpath,"$PWD/$build" \
   -o "$work/export_logits"
export_bin=$(find "$build" -name gptx-export -type f | head -1)
train_bin=$(find "$build" -name gptx-train -type f | head -1)
status=0

# 1. a trained model and a text prompt tokenized by the exported folder's tokenizer
"$train_bin" --steps 40 --eval-every 0 --sample-tokens 0 --checkpoint-every 0 \
  --out-dir "$work/run" > "$work/train.log"
"$export_bin" --model "$work/run/model.safetensors" --format hf --out "$work/tiny_hf"
prompt="Every effort moves you, and the man who had been"
ids=$(py scripts/check_hf_export.py --tokenize "$work/tiny_hf" "$prompt")
"$work/export_logits" logits "$work/run/model.safetensors" "$work/tiny.logits" $ids > /dev/null
echo "tiny preset (tied, qkv bias, 50257 padded to 50304), prompt '$prompt' ($(wc -w <<< "$ids") tokens):"
py scripts/check_hf_export.py "$work/tiny_hf" "$work/tiny.logits" $ids || status=1

# 2. random small models: untied / no bias / padded
ids2=$(seq 3 37 900 | tr '\n' ' ')
for spec in "0 1 1" "1 0 1" "0 0 0"; do
  set -- $spec
  name="tied$1_bias$2_padded$3"
  "$work/export_logits" make "$work/$name.safetensors" $1 $2 $3
  "$export_bin" --model "$work/$name.safetensors" --format hf --out "$work/${name}_hf" > /dev/null
  "$work/export_logits" logits "$work/$name.safetensors" "$work/$name.logits" $ids2 > /dev/null
  echo "random model $name (vocab 1000, 2 layers, width 64), 25 tokens:"
  py scripts/check_hf_export.py "$work/${name}_hf" "$work/$name.logits" $ids2 || status=1
done
exit $status
