#!/usr/bin/env python3
"""PyTorch reference for gptx-bench-train: the same GPT-2 training step on the CPU.

Model: GPT-2 (pre-LN, learned position embeddings, tanh GELU, bias in every
Linear including attn.c_attn, tied output head over a padded vocabulary whose
padded logits are set to -inf before the cross-entropy), fp32.
Step: opt.zero_grad() + forward with targets + loss.backward() +
clip_grad_norm_(1.0) + AdamW.step() (lr 3e-4, betas (0.9, 0.95), eps 1e-8,
weight decay 0.1 on 2-D tensors only) -- the gptx defaults, whose optimizer
step always computes the global gradient norm and clips at 1.0.
Attention is the explicit causal one (torch 1.13 has no
F.scaled_dot_product_attention; it is used when available).

Model FLOPs per token: 6 * P_mat + 6 * n_layer * T * n_embd, P_mat = elements
of c_attn, attn.c_proj, c_fc, mlp.c_proj weights of every layer plus the
(padded) output head once; wpe is not counted. Same formula as gptx-bench-train.

Threads: torch.set_num_threads(--threads). Also run with
OMP_NUM_THREADS=N OPENBLAS_NUM_THREADS=N MKL_NUM_THREADS=N in the environment:
those are read when the libraries load, before this script can act.

Variants (PyTorch 2.x): --fused-adamw (AdamW(fused=True)), --compile (torch.compile
of the model), --autocast (forward and loss under torch.autocast("cpu", bfloat16):
bf16 products with fp32 master weights and optimizer, the counterpart of gptx's
bf16 policy). bench/run_cpu_bench.sh runs eager, fused AdamW + compile, autocast
and autocast + compile and takes the fastest.

Usage: /usr/bin/python3 bench/torch_bench_train.py --config small --threads 2
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "small": dict(vocab=50257, padded_vocab=50304, seq=256, layers=4, heads=4, width=256, batch=4),
    "gpt2-124M-short": dict(vocab=50257, padded_vocab=50304, seq=256, layers=12, heads=12,
                            width=768, batch=2),
}


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C, bias=True)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T),
                             persistent=False)

    def attention(self, x):
        B, T, C = x.shape
        NH, hs = self.NH, C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, V, Vp, T, L, NH, C):
        super().__init__()
        self.V, self.Vp = V, Vp
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH, T) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        resid_std = 0.02 / math.sqrt(2 * L)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = resid_std if name.endswith(("attn_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.wte.weight[V:].zero_()

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)  # tied head, (B, T, Vp)
        if self.Vp > self.V:
            logits[..., self.V:] = float("-inf")  # padded logits never win
        return F.cross_entropy(logits.view(-1, self.Vp), targets.view(-1))


def matmul_params(model):
    n = sum(p.numel() for name, p in model.named_parameters()
            if p.dim() == 2 and not name.startswith("wpe"))
    return n  # wte counted once: it is the output head (the lookup is not a matmul)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = leave)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps, cold step included")
    ap.add_argument("--steps", type=int, default=10)
    for k in ("batch", "seq", "layers", "heads", "width", "vocab"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--padded-vocab", type=int, dest="padded_vocab")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast (CPU)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--fused-adamw", action="store_true", dest="fused_adamw",
                    help="AdamW(fused=True)")
    a = ap.parse_args()
    cfg = dict(CONFIGS[a.config])
    overrides = False
    for k in cfg:
        v = getattr(a, k)
        if v is not None and v != cfg[k]:
            cfg[k], overrides = v, True
    V, Vp, T, L, NH, C, B = (cfg[k] for k in
                             ("vocab", "padded_vocab", "seq", "layers", "heads", "width", "batch"))
    warmup = max(1, a.warmup)

    if a.threads > 0:
        torch.set_num_threads(a.threads)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var) != str(a.threads):
                print(f"warning: {var} is {os.environ.get(var)!r}; set {var}={a.threads} in the "
                      "environment for a fair thread count", file=sys.stderr)
    threads = torch.get_num_threads()

    torch.manual_seed(42)
    model = GPT(V, Vp, T, L, NH, C)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if a.fused_adamw else {}))
    run_model = torch.compile(model) if a.compile else model
    variant = "+".join(v for v, on in (("autocast-bf16", a.autocast), ("compile", a.compile),
                                       ("fused-adamw", a.fused_adamw)) if on) or "eager-fp32"

    # fixed data: a seeded generator, targets are the next token of the stream
    g = torch.Generator().manual_seed(a.seed)
    stream = torch.randint(0, V, (B * T + 1,), generator=g, dtype=torch.long)
    inp = stream[:-1].view(B, T).clone()
    tgt = stream[1:].view(B, T).clone()

    pmat = matmul_params(model)
    flops_per_token = 6 * pmat + 6 * L * T * C
    flops_per_step = flops_per_token * B * T

    def step():
        opt.zero_grad()
        if a.autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run_model(inp, tgt)
        else:
            loss = run_model(inp, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    print(f"torch-bench-train (torch {torch.__version__}, CPU, {variant}; cpu capability "
          f"{getattr(torch.backends.cpu, 'get_cpu_capability', lambda: 'unknown')()})")
    print(f"config      : {a.config}{' (with overrides)' if overrides else ''}: vocab {V} "
          f"(padded {Vp}), T {T}, layers {L}, heads {NH}, width {C}, batch {B}; tied head, "
          "qkv bias, masked padded logits")
    print(f"parameters  : {sum(p.numel() for p in model.parameters())} total, {pmat} in weight "
          "matrices used by matmuls (lm_head/wte once, no wpe)")
    env = ", ".join(f"{v}={os.environ.get(v, 'unset')}"
                    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"))
    print(f"threads     : {threads} (torch.get_num_threads; {env})")
    print(f"steps       : {warmup} warm-up (cold first step included), {a.steps} timed")
    print("timing scope: training steps only: zero_grad+forward+backward+clip+AdamW, data "
          "already in host memory")
    print(f"model FLOPs : 6*{pmat} + 6*{L}*{T}*{C} = {flops_per_token:.4g} per token, "
          f"{flops_per_step:.4g} per step")
    sys.stdout.flush()

    t0 = time.perf_counter()
    loss0 = step()
    cold = time.perf_counter() - t0
    print(f"cold step   : {cold:.4f} s")
    sys.stdout.flush()
    for _ in range(warmup - 1):
        step()
    times = []
    loss = loss0
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    tok_s = B * T / med
    gflops = flops_per_step / med * 1e-9
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"steady state: median {med:.4f} s/step (min {min(times):.4f}, max {max(times):.4f}) "
          f"over {a.steps} steps")
    print(f"throughput  : {tok_s:.1f} tokens/s, {gflops:.2f} model GFLOP/s")
    print(f"loss        : {loss0:.4f} (first step) -> {loss:.4f} (last step)")
    print(f"memory      : process max RSS {maxrss / 2**20:.1f} MiB (whole process, torch included)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(implementation="torch", version=torch.__version__, variant=variant,
                           config=a.config,
                           overrides=overrides, vocab=V, padded_vocab=Vp, seq=T, layers=L,
                           heads=NH, width=C, batch=B, threads=threads, warmup=warmup,
                           steps=a.steps, matmul_parameters=pmat,
                           flops_per_token=flops_per_token, flops_per_step=flops_per_step,
                           cold_step_s=cold, step_median_s=med, step_min_s=min(times),
                           step_max_s=max(times), step_times_s=times, tokens_per_s=tok_s,
                           gflops=gflops, loss_first=loss0, loss_last=loss,
                           max_rss_bytes=maxrss), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
