"""transformers loads gptx-export's Hugging Face folders and computes gptx's logits.

Run by scripts/check_hf_export.sh (outside CI: needs PyTorch and transformers).
  check_hf_export.py HF_DIR GPTX_LOGITS_BIN TOKENS...
Loads HF_DIR with GPT2LMHeadModel.from_pretrained (fp32, eager attention), runs the
token ids and prints the max |logit difference| against gptx's logits (T, V) fp32.
  check_hf_export.py --tokenize HF_DIR TEXT
prints the ids of TEXT by the folder's own tokenizer (AutoTokenizer: vocab.json,
merges.txt, tokenizer_config.json) and fails when its model_max_length is not the
model's context (config.json's n_positions).
"""
import sys

import numpy as np
import torch
import json

from transformers import AutoTokenizer, GPT2LMHeadModel


def main():
    if sys.argv[1] == "--tokenize":
        tok = AutoTokenizer.from_pretrained(sys.argv[2])
        with open(sys.argv[2] + "/config.json") as f:
            n_positions = json.load(f)["n_positions"]
        print(" ".join(str(i) for i in tok(sys.argv[3])["input_ids"]))
        if tok.model_max_length != n_positions:
            print(f"model_max_length {tok.model_max_length}, context {n_positions}", file=sys.stderr)
            return 1
        return 0
    hf_dir, gptx_bin, ids = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3:]]
    model = GPT2LMHeadModel.from_pretrained(hf_dir, dtype=torch.float32,
                                            attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([ids])).logits[0].double().numpy()
    ref = np.fromfile(gptx_bin, dtype="<f4").reshape(len(ids), -1).astype(np.float64)
    if ref.shape != out.shape:
        print(f"shape: gptx {ref.shape}, transformers {out.shape}")
        return 1
    d = np.abs(ref - out)
    print(f"max |dlogit| {d.max():.3g} (mean {d.mean():.3g}; logits up to {np.abs(ref).max():.3g}), "
          f"argmax agree {np.mean(ref.argmax(-1) == out.argmax(-1)) * 100:.0f}%")
    return 0 if d.max() <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
