#!/usr/bin/env python3
"""PyTorch twin of gptx-bench-gpu: GPT-2 124M training steps on one GPU.

Same model and step as bench/gpu/gptx_bench_gpu.c: vocab 50257 padded to
50304 (padded logits left out of the loss), T 1024, 12 layers, 12 heads,
width 768, tied head, qkv bias, tanh GELU; one step = zero_grad + forward +
loss + backward + clip_grad_norm_(1.0) + AdamW (lr 3e-4, betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices), then torch.cuda.synchronize().

PyTorch's fast path: bf16 autocast (fp32 master weights and AdamW state),
F.scaled_dot_product_attention(is_causal=True) (flash attention), fused
AdamW, TF32 allowed for fp32 products, torch.compile of the model.

Model FLOPs per token are counted like the gptx benchmark:
6 * P_mat + 6 * L * T * C (P_mat: weight matrices used in products, the
tied head once, wpe not); MFU against 989 TFLOP/s (dense bf16 peak).

  python3 bench/gpu/torch_gpu_bench.py [--batch B | --max-batch B] [--steps N]
                                       [--warmup N] [--no-compile] [--json FILE]
Without --batch, the largest power of two <= --max-batch that fits is used
(each try compiles anew: start it close to the answer).
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK = 989e12


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, Vp, T, L, H, C):
        super().__init__()
        self.V = V
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head, padded rows
        logits = logits[..., : self.V].float()  # padded columns are not in the softmax
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    V, Vp, L, H, C, T = 50257, 50304, 12, 12, 768, a.seq
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, compile={not a.no_compile}",
          flush=True)

    def attempt(B):
        torch.manual_seed(0)
        model = GPT(V, Vp, T, L, H, C).to(dev)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": other, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        fwd = model if a.no_compile else torch.compile(model)
        g = torch.Generator(device="cpu").manual_seed(1234)
        data = torch.randint(0, V, (B, T + 1), generator=g).to(dev)
        x, y = data[:, :T].contiguous(), data[:, 1:].contiguous()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            torch.cuda.synchronize()
            return loss.item()

        t0 = time.perf_counter()
        first = step()
        cold = time.perf_counter() - t0
        for _ in range(a.warmup - 1):
            step()
        times, last = [], first
        for _ in range(a.steps):
            t0 = time.perf_counter()
            last = step()
            times.append(time.perf_counter() - t0)
        pmat = sum(p.numel() for n, p in model.named_parameters()
                   if p.dim() == 2 and not n.startswith("wpe"))
        return cold, sorted(times), first, last, pmat

    B = a.batch or a.max_batch
    while True:
        try:
            torch.cuda.reset_peak_memory_stats()
            cold, times, first, last, pmat = attempt(B)
            break
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if "out of memory" not in str(e).lower():
                raise
            print(f"batch {B}: does not fit", flush=True)
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            if a.batch or B == 1:
                raise
            B //= 2
    med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    fpt = 6 * pmat + 6 * L * T * C
    tok_s = B * T / med
    res = {
        "implementation": "pytorch", "torch": torch.__version__, "compile": not a.no_compile,
        "batch": B, "seq": T, "flops_per_token": fpt, "cold_step_s": cold,
        "step_median_s": med, "step_min_s": times[0], "step_max_s": times[-1],
        "tokens_per_s": tok_s, "mfu": fpt * tok_s / PEAK,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "loss_first": first, "loss_last": last,
    }
    print(f"batch       : {B} x {T}")
    print(f"cold        : first step {cold:.2f} s (includes torch.compile)")
    print(f"steady      : median {med:.4f} s/step (min {times[0]:.4f}, max {times[-1]:.4f}) over {len(times)} steps")
    print(f"throughput  : {tok_s:.0f} tokens/s, {fpt * tok_s * 1e-12:.1f} model TFLOP/s, MFU {100 * res['mfu']:.1f} % of 989 TFLOP/s")
    print(f"loss        : {first:.4f} -> {last:.4f}")
    print(f"memory      : max allocated {res['max_memory_allocated'] / 2**30:.2f} GiB, max reserved {res['max_memory_reserved'] / 2**30:.2f} GiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
