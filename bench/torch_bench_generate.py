#!/usr/bin/env python3
"""PyTorch reference for gptx-bench-generate: GPT-2 generation with a key/value cache.

A minimal GPT-2 (pre-LN, learned positions, tanh GELU, tied head over the
padded vocabulary with the padded logits masked) written for inference with
a `past_key_values`-style cache: each layer keeps (keys, values) of shape
(1, NH, t, hs) and appends the new position's; attention is
F.scaled_dot_product_attention over the cache (causal for the prompt). The
weights are read from a gptx safetensors file (`gptx-bench-generate
--save-model FILE`), so both programs run the same numbers; greedy decoding,
batch 1, under torch.inference_mode().

Timed as gptx-bench-generate times itself: prefill = the pass over the prompt
up to its last logits; decode = each later token (one position, the greedy
pick included). Variants: fp32 (default), --bf16 (weights and activations
bf16: model.to(bfloat16)), --compile (torch.compile of the one-token step).

Usage: OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 python bench/torch_bench_generate.py \
         --model /tmp/gpt2-random.safetensors --threads 2 --prompt 512 --new 256
"""
import argparse
import json
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        lo, hi = info["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(data[lo:hi], dtype=np.float32)
                                         .reshape(info["shape"]).copy())
    return meta, tensors


class GPT2:
    def __init__(self, meta, t, dtype):
        self.V = int(meta["vocab_size"])
        self.L = int(meta["n_layer"])
        self.NH = int(meta["n_head"])
        self.C = int(meta["n_embd"])
        self.eps = float(meta["layernorm_eps"])
        self.w = {k: v.to(dtype) for k, v in t.items()}
        self.dtype = dtype

    def ln(self, x, name):
        return F.layer_norm(x, (self.C,), self.w[name + ".weight"], self.w[name + ".bias"],
                            self.eps)

    def forward(self, ids, pos0, cache):
        """ids (1, n) at positions pos0 .. pos0 + n - 1; cache: list of (k, v) or None."""
        w, C, NH, hs = self.w, self.C, self.NH, self.C // self.NH
        n = ids.shape[1]
        x = w["wte.weight"][ids] + w["wpe.weight"][pos0:pos0 + n]
        for l in range(self.L):
            p = f"h.{l}."
            h = self.ln(x, p + "ln_1")
            qkv = F.linear(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(1, n, NH, hs).transpose(1, 2)
            k = k.view(1, n, NH, hs).transpose(1, 2)
            v = v.view(1, n, NH, hs).transpose(1, 2)
            if cache[l] is not None:
                k = torch.cat([cache[l][0], k], dim=2)
                v = torch.cat([cache[l][1], v], dim=2)
            cache[l] = (k, v)
            # the prompt: causal over itself; one new token: every cached key
            y = F.scaled_dot_product_attention(q, k, v, is_causal=pos0 == 0 and n > 1)
            y = y.transpose(1, 2).reshape(1, n, C)
            x = x + F.linear(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
            h = self.ln(x, p + "ln_2")
            h = F.gelu(F.linear(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]),
                       approximate="tanh")
            x = x + F.linear(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
        x = self.ln(x[:, -1:, :], "ln_f")
        logits = F.linear(x, w["wte.weight"])[0, 0].float()
        logits[self.V:] = float("-inf")  # the padded vocabulary, masked
        return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="gptx safetensors (gptx-bench-generate "
                    "--save-model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) != str(a.threads):
            print(f"warning: {var} is {os.environ.get(var)!r}; set it to {a.threads}",
                  file=sys.stderr)
    meta, tensors = load_safetensors(a.model)
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    m = GPT2(meta, tensors, dtype)
    step = torch.compile(m.forward, dynamic=True) if a.compile else m.forward
    variant = ("bf16" if a.bf16 else "fp32") + ("+compile" if a.compile else "")

    # the prompt of gptx-bench-generate: xorshift64* ids from seed 1234
    x, ids = 1234, []
    for _ in range(a.prompt):
        x ^= x >> 12
        x ^= (x << 25) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 27
        ids.append((((x * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF) >> 33) % m.V)

    def run(prompt, n_new):
        cache = [None] * m.L
        t0 = time.perf_counter()
        logits = step(torch.tensor([prompt]), 0, cache)
        tok = int(torch.argmax(logits))
        prefill = time.perf_counter() - t0
        times, out = [], [tok]
        for i in range(n_new - 1):
            t0 = time.perf_counter()
            logits = step(torch.tensor([[tok]]), len(prompt) + i, cache)
            tok = int(torch.argmax(logits))
            times.append(time.perf_counter() - t0)
            out.append(tok)
        return prefill, times, out

    with torch.inference_mode():
        run(ids, 8)  # warm-up at the same prompt length (and compilation)
        prefill, times, out = run(ids, a.new)
    decode = sum(times)
    r = dict(implementation="torch", version=torch.__version__, variant=variant,
             threads=torch.get_num_threads(), prompt=a.prompt, new=a.new,
             prefill_tokens=a.prompt, prefill_s=prefill, prefill_tokens_per_s=a.prompt / prefill,
             decode_tokens=len(times), decode_s=decode,
             decode_tokens_per_s=len(times) / decode,
             decode_median_ms=1e3 * statistics.median(times), tokens=out[:16])
    print(f"torch-bench-generate (torch {torch.__version__}, {variant}, {r['threads']} threads; "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()})")
    print(f"prefill     : {a.prompt} tokens in {prefill:.4f} s = {r['prefill_tokens_per_s']:.1f} "
          "tokens/s")
    print(f"decode      : {len(times)} tokens in {decode:.4f} s = {r['decode_tokens_per_s']:.2f} "
          f"tokens/s (median {r['decode_median_ms']:.2f} ms/token)")
    print(f"first tokens: {out[:8]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
