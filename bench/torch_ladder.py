#!/usr/bin/env python3
"""PyTorch side of the gptx-bench ablation ladder (docs/ablation.md).

Runs the rows of the ladder that PyTorch 1.13 on the CPU can express, on the
same config, tokens, step counts and thread count as gptx-bench, and prints
the same columns; with --gptx-json it also prints gptx/PyTorch ratios per
row, measured in the same session.

Rows (same keys and order as gptx-bench):
  baseline         manual attention (q @ k^T, an explicit additive float causal
                   mask, softmax, @ v), separate q/k/v nn.Linear, LayerNorm and
                   tanh-GELU written out step by step, AdamW(foreach=False),
                   vocab 50257, batch B
  flash_attention  SDPA: n/a, torch 1.13 has no F.scaled_dot_product_attention
                   (in cumulative mode the ladder goes on with the manual attention)
  fused_qkv        one nn.Linear(C, 3C)
  fused_norm_gelu  nn.LayerNorm and F.gelu(approximate="tanh")
  fused_adamw      AdamW(foreach=True): multi-tensor kernels on the CPU;
                   AdamW(fused=True) is CUDA-only in 1.13
  padded_vocab     wte padded to 50304 rows, padded logits set to -inf
  batch_2x         2B rows per step (twice the tokens per optimizer update)
  bf16_autocast    extra row, off the ladder: torch.autocast("cpu", bfloat16)
                   around the forward; cumulative: on top of the padded-vocab
                   row, isolated: on top of the baseline
  torch_compile    n/a: torch.compile does not exist in 1.13

Model: GPT-2 (pre-LN, learned positions, tanh GELU, bias in every Linear,
tied output head), fp32, the parameters of every row from one canonical set
drawn with --seed (the same function of the seed as the gptx layout, not the
same numbers as gptx's Philox initialisation). Step: zero_grad + forward with
targets + backward + clip_grad_norm_(1.0) + AdamW (lr 3e-4, betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on 2-D tensors): gptx's default step.

Data: the token stream gptx-bench wrote (PREFIX.tokens.bin, an llm.c shard of
data/the-verdict.txt); the last B*T+1 tokens are the held-out batch, training
batches are consecutive windows of the rest, in order -- as in gptx-bench.

Timing scope: training steps only (zero_grad + forward + backward + clip +
AdamW; data already in memory), time.perf_counter; steady tokens/s = median
and min-max over --repeats repeats of --steps steps, after the cold first
step and --warmup untimed steps. Memory: the process's peak RSS during the
row (VmHWM after resetting it through /proc/self/clear_refs), torch included:
not the same measure as gptx's library-buffer peak.

Threads: --threads N sets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
MKL_NUM_THREADS before torch is imported, and torch.set_num_threads(N).

Usage:
  gptx-bench --config small --mode cumulative --threads 2 --out-prefix out/small-cum
  /usr/bin/python3 bench/torch_ladder.py --config small --mode cumulative --threads 2 \\
      --tokens out/small-cum.tokens.bin --gptx-json out/small-cum.json --out-prefix out/torch-small-cum
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

CONFIGS = {
    # the shapes and default step counts of gptx-bench
    "tiny": dict(vocab=50257, padded_vocab=50304, seq=32, layers=2, heads=2, width=64, batch=4,
                 warmup=1, steps=5, repeats=3),
    "small": dict(vocab=50257, padded_vocab=50304, seq=256, layers=4, heads=4, width=256, batch=4,
                  warmup=1, steps=1, repeats=7),
    "gpt2-124M-short": dict(vocab=50257, padded_vocab=50304, seq=256, layers=12, heads=12,
                            width=768, batch=2, warmup=0, steps=1, repeats=3),
}

# (key, label, what changes, logits tolerance, loss tolerance or None = not compared,
#  n/a reason or None); tolerances as in gptx-bench (bench/ladder/ladder_rows.c).
#  bf16 keeps 8 significant bits (relative rounding 2^-9 per operation): its
#  logits move by ~1e-2 on gpt2-124M-short (measured 2.6e-2), its loss by ~2e-4.
CHANGES = [
    ("flash_attention", "SDPA", "manual attention -> F.scaled_dot_product_attention", 1e-4, 1e-4,
     "n/a (torch 1.13 has no F.scaled_dot_product_attention)"),
    ("fused_qkv", "fused QKV", "q, k, v: three nn.Linear -> one nn.Linear(C, 3C)", 1e-4, 1e-4,
     None),
    ("fused_norm_gelu", "fused LN/GELU",
     "LayerNorm/GELU written out -> nn.LayerNorm, F.gelu(approximate='tanh')", 1e-4, 1e-4, None),
    ("fused_adamw", "foreach AdamW",
     "AdamW(foreach=False) -> AdamW(foreach=True); fused=True is CUDA-only in 1.13", 0.0, 1e-4,
     None),
    ("padded_vocab", "padded vocab", "vocab 50257 -> padded 50304, padded logits -inf", 1e-4,
     1e-4, None),
    ("batch_2x", "batch 2B", "batch B -> 2B rows per step (twice the tokens per update)", 1e-4,
     None, None),
]
EXTRA = [
    ("bf16_autocast", "bf16 autocast (extra)",
     "torch.autocast('cpu', bfloat16) around the forward", 0.1, 5e-3, None),
    ("torch_compile", "torch.compile", "torch.compile(model)", None, None,
     "n/a (torch.compile does not exist in torch 1.13)"),
]

BASE_VARIANT = dict(fused_qkv=False, fused_norm_gelu=False, foreach_adamw=False, padded=False,
                    batch_mult=1, bf16=False)
APPLY = {
    "flash_attention": None,
    "fused_qkv": ("fused_qkv", True),
    "fused_norm_gelu": ("fused_norm_gelu", True),
    "fused_adamw": ("foreach_adamw", True),
    "padded_vocab": ("padded", True),
    "batch_2x": ("batch_mult", 2),
    "bf16_autocast": ("bf16", True),
    "torch_compile": None,
}


def build_rows(mode):
    """The rows for mode, each with its variant and summed tolerances."""
    cumulative = mode == "cumulative"
    base = dict(key="baseline", label="baseline (textbook fp32)",
                change="manual attention + float mask, separate q/k/v, LN/GELU written out, "
                       "AdamW foreach=False, vocab 50257",
                variant=dict(BASE_VARIANT), na=None, logits_tol=0.0, loss_tol=0.0,
                is_baseline=True)
    rows = [base]
    ladder_top = base
    for key, name, change, ltol, stol, na in CHANGES:
        ref = ladder_top if cumulative else base
        row = dict(key=key, label=("+ " if cumulative else "") + name + ("" if cumulative else
                                                                          " alone"),
                   change=change, na=na, is_baseline=False, variant=dict(ref["variant"]))
        if na is None:
            field, value = APPLY[key]
            row["variant"][field] = value
        add = (lambda a, b: None if a is None or b is None else a + b)
        row["logits_tol"] = (0.0 if ref["is_baseline"] else ref["logits_tol"]) + ltol
        row["loss_tol"] = add(0.0 if ref["is_baseline"] else ref["loss_tol"], stol)
        rows.append(row)
        if cumulative and na is None and key != "batch_2x":
            ladder_top = row
        elif cumulative and na is not None:
            # an n/a row adds nothing: the next row builds on the last one that ran
            row["variant"] = dict(ref["variant"])
    for key, name, change, ltol, stol, na in EXTRA:
        ref = ladder_top if cumulative else base
        row = dict(key=key, label=name, change=change, na=na, is_baseline=False,
                   variant=dict(ref["variant"]), logits_tol=None, loss_tol=None)
        if na is None:
            field, value = APPLY[key]
            row["variant"][field] = value
            row["logits_tol"] = (0.0 if ref["is_baseline"] else ref["logits_tol"]) + ltol
            row["loss_tol"] = (0.0 if ref["is_baseline"] else ref["loss_tol"]) + stol
        rows.append(row)
    return rows


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--mode", default="cumulative", choices=["cumulative", "isolated"])
    ap.add_argument("--tokens", required=True,
                    help="llm.c shard written by gptx-bench (PREFIX.tokens.bin)")
    ap.add_argument("--steps", type=int, help="timed steps per repeat (default: as gptx-bench)")
    ap.add_argument("--warmup", type=int, help="untimed steps after the cold first step")
    ap.add_argument("--repeats", type=int, help="repeats of the timed steps")
    ap.add_argument("--threads", type=int, default=0, help="0 = leave torch's default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out-prefix", help="write PREFIX.csv and PREFIX.json")
    ap.add_argument("--gptx-json", help="gptx-bench JSON of the same config and mode: print "
                                        "gptx/PyTorch ratios")
    a = ap.parse_args()
    cfg = CONFIGS[a.config]
    if a.steps is None:
        a.steps = cfg["steps"]
    if a.warmup is None:
        a.warmup = cfg["warmup"]
    if a.repeats is None:
        a.repeats = cfg["repeats"]
    if a.steps < 1 or a.warmup < 0 or a.repeats < 1:
        ap.error("--steps and --repeats must be >= 1, --warmup >= 0")
    return a


ARGS = parse_args()
if ARGS.threads > 0:
    # read when the libraries load, so before torch is imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- model -------------------------------------------------------------------

class ManualLayerNorm(nn.Module):
    """LayerNorm as the textbook writes it: mean, centre, variance, scale, shift."""

    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.bias = nn.Parameter(torch.zeros(C))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        var = (xc * xc).mean(-1, keepdim=True)
        return xc * torch.rsqrt(var + self.eps) * self.weight + self.bias


def manual_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Block(nn.Module):
    def __init__(self, C, NH, T, v):
        super().__init__()
        self.NH, self.C = NH, C
        self.fused_qkv, self.fused = v["fused_qkv"], v["fused_norm_gelu"]
        Norm = (lambda: nn.LayerNorm(C, eps=1e-5)) if self.fused else (lambda: ManualLayerNorm(C))
        self.ln_1, self.ln_2 = Norm(), Norm()
        if self.fused_qkv:
            self.c_attn = nn.Linear(C, 3 * C)
        else:
            self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.attn_proj = nn.Linear(C, C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        mask = torch.full((T, T), float("-inf")).triu(1)  # 0 on and below the diagonal
        self.register_buffer("mask", mask, persistent=False)

    def attention(self, x):
        B, T, C = x.shape
        NH, hs = self.NH, C // self.NH
        if self.fused_qkv:
            q, k, v = self.c_attn(x).split(C, dim=2)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)) + self.mask[:T, :T]
        y = F.softmax(att, dim=-1) @ v  # (B, NH, T, T) kept for backward
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = self.c_fc(self.ln_2(x))
        h = F.gelu(h, approximate="tanh") if self.fused else manual_gelu(h)
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, V, Vp, T, L, NH, C, v):
        super().__init__()
        self.V, self.Vp = V, Vp
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH, T, v) for _ in range(L)])
        Norm = nn.LayerNorm if v["fused_norm_gelu"] else ManualLayerNorm
        self.ln_f = Norm(C, eps=1e-5)

    def logits(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head, (B, T, Vp)
        if self.Vp > self.V:
            logits[..., self.V:] = float("-inf")  # padded columns never take part
        return logits

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, self.Vp).float(), targets.reshape(-1))


def canonical_parameters(shape, seed):
    """One parameter set in the fused layout (HF names), GPT-2 initialisation:
    N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, LN 1/0."""
    V, T, L, C = shape["vocab"], shape["seq"], shape["layers"], shape["width"]
    g = torch.Generator().manual_seed(seed)
    rstd = 0.02 / math.sqrt(2 * L)
    normal = (lambda *s, std=0.02: torch.randn(*s, generator=g) * std)
    p = {"wte": normal(V, C), "wpe": normal(T, C)}
    for l in range(L):
        p[f"h.{l}.c_attn.weight"] = normal(3 * C, C)
        p[f"h.{l}.attn.c_proj.weight"] = normal(C, C, std=rstd)
        p[f"h.{l}.c_fc.weight"] = normal(4 * C, C)
        p[f"h.{l}.mlp.c_proj.weight"] = normal(C, 4 * C, std=rstd)
    return p


@torch.no_grad()
def load_parameters(model, p, C):
    """Copies the canonical set into a variant; biases 0, LayerNorm 1/0."""
    for name, t in model.named_parameters():
        if name.endswith("bias"):
            t.zero_()
        elif ".ln_" in name or name.startswith("ln_f"):
            t.fill_(1.0)
    model.wte.weight.zero_()
    model.wte.weight[: p["wte"].shape[0]] = p["wte"]
    model.wpe.weight.copy_(p["wpe"])
    for l, blk in enumerate(model.h):
        w = p[f"h.{l}.c_attn.weight"]
        if blk.fused_qkv:
            blk.c_attn.weight.copy_(w)
        else:
            blk.q.weight.copy_(w[:C])
            blk.k.weight.copy_(w[C:2 * C])
            blk.v.weight.copy_(w[2 * C:])
        blk.attn_proj.weight.copy_(p[f"h.{l}.attn.c_proj.weight"])
        blk.c_fc.weight.copy_(p[f"h.{l}.c_fc.weight"])
        blk.mlp_proj.weight.copy_(p[f"h.{l}.mlp.c_proj.weight"])


# ---- data and memory ---------------------------------------------------------

def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"torch_ladder.py: {path} is not an llm.c token shard")
        data = f.read()
    n = header[2]
    if len(data) != 2 * n:
        sys.exit(f"torch_ladder.py: {path} is truncated")
    return torch.tensor(struct.unpack(f"<{n}H", data), dtype=torch.long)


def load_average():
    """/proc/loadavg's 1, 5 and 15 minute loads, as "a/b/c"."""
    try:
        with open("/proc/loadavg") as f:
            return "/".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---- one row -----------------------------------------------------------------

def run_row(row, shape, tokens, a, canon, base):
    v = row["variant"]
    V, T = shape["vocab"], shape["seq"]
    B = shape["batch"] * v["batch_mult"]
    Vp = shape["padded_vocab"] if v["padded"] else V
    eval_n = shape["batch"] * T + 1
    train, held = tokens[:-eval_n], tokens[-eval_n:]
    eval_in, eval_tg = held[:-1].view(shape["batch"], T), held[1:].view(shape["batch"], T)
    per = B * T
    batches = (len(train) - 1) // per

    def batch(step):
        p = (step % batches) * per
        return train[p:p + per].view(B, T), train[p + 1:p + per + 1].view(B, T)

    res = dict(B=B, tokens_per_step=per, finite=True, error="")
    reset_peak_rss()
    t0 = time.perf_counter()
    model = GPT(V, Vp, T, shape["layers"], shape["heads"], shape["width"], v)
    load_parameters(model, canon, shape["width"])
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=v["foreach_adamw"])
    res["create_s"] = time.perf_counter() - t0

    def step(k):
        x, y = batch(k)
        opt.zero_grad()
        if v["bf16"]:
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    k = 0
    s0 = time.perf_counter()
    losses = [step(k)]
    k += 1
    now = time.perf_counter()
    res["first_step_s"], res["cold_start_s"] = now - s0, now - t0
    for _ in range(a.warmup):
        losses.append(step(k))
        k += 1
    times = []
    for _ in range(a.repeats):
        s0 = time.perf_counter()
        for _ in range(a.steps):
            losses.append(step(k))
            k += 1
        times.append(time.perf_counter() - s0)
    res["peak_rss_bytes"] = peak_rss_bytes()
    tok = per * a.steps
    res["tps_median"] = tok / statistics.median(times)
    res["tps_min"], res["tps_max"] = tok / max(times), tok / min(times)
    res["finite"] = all(math.isfinite(x) for x in losses)

    def policy():
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=v["bf16"])

    with torch.no_grad():
        with policy():
            # in double from the logits: a float loss would round small differences away
            held_logits = model.logits(eval_in).double()
        res["eval_loss"] = float(F.cross_entropy(held_logits.view(-1, Vp), eval_tg.reshape(-1)))
        del held_logits
        # leaving autocast drops its cache of bf16 weight copies, which would
        # otherwise keep the trained weights
        load_parameters(model, canon, shape["width"])  # the fresh model again
        with policy():
            logits = model.logits(eval_in)[..., :V].float().contiguous()
    res["finite"] = res["finite"] and math.isfinite(res["eval_loss"])
    if row["is_baseline"]:
        res["loss_diff"], res["logits_max_abs"] = 0.0, 0.0
        return res, logits
    d = (logits - base["logits"]).abs()
    res["logits_max_abs"] = float(d.max()) if bool(torch.isfinite(d).all()) else math.inf
    res["loss_diff"] = abs(res["eval_loss"] - base["eval_loss"])
    return res, None


def judge(row, res):
    if not res.get("ran"):
        return False
    if row["is_baseline"]:
        return res["finite"]
    ok = res["finite"] and res["logits_max_abs"] <= row["logits_tol"]
    if row["loss_tol"] is not None:
        ok = ok and res["loss_diff"] <= row["loss_tol"]
    return ok


# ---- report ------------------------------------------------------------------

def fmt(x, f):
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else \
        ("0" if x == 0 else format(x, f))


def status(row, res):
    if row["na"]:
        return row["na"]
    if not res.get("ran"):
        return "FAIL (error)"
    if not res["pass"]:
        return "FAIL"
    return "PASS (reference)" if row["is_baseline"] else "PASS"


def markdown(rows, results, shape, a, info):
    cum = a.mode == "cumulative"
    n_total = 1 + a.warmup + a.repeats * a.steps
    budget = n_total * shape["batch"] * shape["seq"]
    print(f"## PyTorch ladder — config `{a.config}`, mode `{a.mode}`\n")
    print(f"- torch {torch.__version__}, CPU, fp32 unless the row says otherwise; "
          f"{torch.get_num_threads()} threads (torch.get_num_threads; {info['env']}); "
          f"Python {sys.version.split()[0]}; load average (1/5/15 min) at start "
          f"{info['load_start']}, at end {info['load_end']}")
    print(f"- model: vocab {shape['vocab']} (padded rows: {shape['padded_vocab']}), "
          f"T {shape['seq']}, {shape['layers']} layers, {shape['heads']} heads, width "
          f"{shape['width']}, batch B = {shape['batch']}; tied head, bias everywhere; one "
          f"canonical parameter set (seed {a.seed}) for every row")
    print(f"- data: {a.tokens}, {info['n_tokens']} tokens, the last "
          f"{shape['batch'] * shape['seq'] + 1} held out")
    print(f"- steps per row: N = {n_total} = 1 cold + {a.warmup} warm-up + {a.repeats} repeats "
          f"x {a.steps} timed; token budget N x B x T = {budget}")
    print("- timing scope: training steps only: zero_grad + forward + backward + clip + AdamW; "
          "data already in memory (time.perf_counter)")
    print("- peak RSS: the process's VmHWM during the row (torch and Python included), not "
          "gptx's library-buffer peak\n")
    hdr = ["#", "row", "B", "tokens/step", "updates/budget", "tokens/s median", "min–max",
           "x baseline"] + (["x previous"] if cum else []) + \
          ["cold start s (first step)", "peak RSS MiB", "eval loss", "Δ eval loss (tol)",
           "max Δ logit (tol)", "finite", "status"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" if h in ("row", "finite", "status") else "---:" for h in hdr) + "|")
    base_tps = results[0].get("tps_median") if results[0].get("ran") else None
    prev = None
    for i, (row, res) in enumerate(zip(rows, results)):
        if row["na"] or not res.get("ran"):
            cells = [str(i), row["label"]] + ["—"] * (len(hdr) - 3) + [status(row, res)]
            print("| " + " | ".join(cells) + " |")
            continue
        sp = res["tps_median"] / base_tps if base_tps else float("nan")
        cells = [str(i), row["label"], str(res["B"]), str(res["tokens_per_step"]),
                 f"{budget / res['tokens_per_step']:.3g}", f"{res['tps_median']:.0f}",
                 f"{res['tps_min']:.0f}–{res['tps_max']:.0f}", f"{sp:.2f}"]
        if cum:
            cells.append(f"{res['tps_median'] / prev:.2f}" if prev else "—")
        cells += [f"{res['cold_start_s']:.2f} ({res['first_step_s']:.2f})",
                  f"{res['peak_rss_bytes'] / 2**20:.0f}", f"{res['eval_loss']:.4f}"]
        if row["is_baseline"]:
            cells += ["0 (reference)", "0 (reference)"]
        else:
            lt = "not compared: 2x tokens/update" if row["loss_tol"] is None else \
                ("exact" if row["loss_tol"] == 0 else f"{row['loss_tol']:.0e}")
            cells.append(f"{fmt(res['loss_diff'], '.2e')} ({lt})")
            gt = "exact" if row["logits_tol"] == 0 else f"{row['logits_tol']:.0e}"
            cells.append(f"{fmt(res['logits_max_abs'], '.2e')} ({gt})")
        cells += ["yes" if res["finite"] else "**no**", status(row, res)]
        print("| " + " | ".join(cells) + " |")
        if cum and row["key"] not in ("batch_2x", "bf16_autocast"):
            prev = res["tps_median"]
    print()
    for i, (row, res) in enumerate(zip(rows, results)):
        if res.get("error"):
            print(f"- row {i} ({row['label']}) error: {res['error']}")
    print("Speed-ups do not multiply: a cumulative row's gain is measured on top of every change "
          "above it, and the product of the isolated gains is not the gain of all changes "
          "together. In cumulative mode the PyTorch ladder has no SDPA row (n/a in 1.13), so "
          "its later rows keep the manual attention.")


def side_by_side(rows, results, gptx_path):
    with open(gptx_path) as f:
        g = json.load(f)
    grows = {r.get("key"): r for r in g["rows"]}
    print(f"\n## gptx / PyTorch, same session — config `{g['config']['name']}`, mode "
          f"`{g['mode']}`, {g['run']['threads']} threads\n")
    print("| row | gptx tokens/s | PyTorch tokens/s | gptx/PyTorch | gptx peak MiB (library) | "
          "PyTorch peak RSS MiB | gptx max Δ logit | PyTorch max Δ logit | gptx eval loss | "
          "PyTorch eval loss |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row, res in zip(rows, results):
        gr = grows.get(row["key"])
        if gr is None and row["na"]:
            continue
        gtps = gr["tokens_per_s"]["median"] if gr and gr.get("available") else None
        ttps = res.get("tps_median") if res.get("ran") else None
        ratio = f"{gtps / ttps:.2f}" if gtps and ttps else "—"
        cells = [row["label"] if not gr else f"{gr['row']} / {row['label']}",
                 f"{gtps:.0f}" if gtps else (gr["status"] if gr else "—"),
                 f"{ttps:.0f}" if ttps else (row["na"] or "FAIL"), ratio,
                 f"{gr['peak_bytes'] / 2**20:.0f}" if gtps else "—",
                 f"{res['peak_rss_bytes'] / 2**20:.0f}" if ttps else "—",
                 fmt(gr.get("logits_max_abs_diff"), ".1e") if gtps else "—",
                 fmt(res.get("logits_max_abs"), ".1e") if ttps else "—",
                 fmt(gr.get("eval_loss"), ".4f") if gtps else "—",
                 fmt(res.get("eval_loss"), ".4f") if ttps else "—"]
        print("| " + " | ".join(cells) + " |")
    print("\nThe two sides start from different random parameters (gptx: Philox, PyTorch: "
          "torch.Generator, same seed number), so their eval losses agree only roughly; "
          "each side's numerics columns compare with its own baseline.")


def main():
    a = ARGS
    shape = dict(CONFIGS[a.config])
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    tokens = read_shard(a.tokens)
    rows = build_rows(a.mode)
    canon = canonical_parameters(shape, a.seed)
    env = ", ".join(f"{k}={os.environ.get(k, 'unset')}"
                    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"))
    info = dict(env=env, n_tokens=len(tokens), load_start=load_average())
    need = (shape["batch"] * shape["seq"] + 1) + (2 * shape["batch"] * shape["seq"] + 1)
    if len(tokens) < need:
        sys.exit(f"torch_ladder.py: {a.tokens} has {len(tokens)} tokens; {need} needed")
    n_total = 1 + a.warmup + a.repeats * a.steps
    print(f"torch_ladder.py: config {a.config}, mode {a.mode}, {n_total} steps per row",
          file=sys.stderr)
    results, base = [], None
    t_all = time.perf_counter()
    for i, row in enumerate(rows):
        if row["na"]:
            results.append(dict(ran=False))
            continue
        t0 = time.perf_counter()
        try:
            res, logits = run_row(row, shape, tokens, a, canon, base)
            res["ran"] = True
            if row["is_baseline"]:
                base = dict(logits=logits, eval_loss=res["eval_loss"])
        except Exception as e:  # a failing row is reported, the ladder goes on
            res = dict(ran=False, error=f"{type(e).__name__}: {e}", finite=False)
            if row["is_baseline"]:
                print(f"torch_ladder.py: the baseline failed: {res['error']}", file=sys.stderr)
        res["pass"] = judge(row, res)
        results.append(res)
        print(f"  row {i:2d} {row['label']:<28s} {res.get('tps_median', 0):8.0f} tokens/s  "
              f"{'PASS' if res['pass'] else 'FAIL'} ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr)
    wall = time.perf_counter() - t_all
    info["load_end"] = load_average()
    markdown(rows, results, shape, a, info)
    if a.gptx_json:
        side_by_side(rows, results, a.gptx_json)
    all_pass = all(r["pass"] for row, r in zip(rows, results) if not row["na"])
    if a.out_prefix:
        out = dict(tool="torch_ladder.py", torch_version=torch.__version__,
                   python=sys.version.split()[0], config=dict(name=a.config, **shape),
                   mode=a.mode, run=dict(threads=torch.get_num_threads(), env=env,
                                         warmup=a.warmup, steps=a.steps, repeats=a.repeats,
                                         total_steps=n_total, seed=a.seed, wall_s=wall,
                                         load_start=info["load_start"],
                                         load_end=info["load_end"]),
                   rows=[dict(index=i, key=row["key"], row=row["label"], change=row["change"],
                              status=status(row, res), available=not row["na"],
                              variant=row["variant"], logits_tol=row["logits_tol"],
                              loss_tol=row["loss_tol"],
                              **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                 for k, v in res.items()})
                         for i, (row, res) in enumerate(zip(rows, results))],
                   all_pass=all_pass)
        with open(a.out_prefix + ".json", "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        cols = ["index", "key", "row", "status", "B", "tokens_per_step", "tps_median", "tps_min",
                "tps_max", "cold_start_s", "first_step_s", "create_s", "peak_rss_bytes",
                "eval_loss", "loss_diff", "loss_tol", "logits_max_abs", "logits_tol", "finite",
                "error"]
        with open(a.out_prefix + ".csv", "w") as f:
            f.write(",".join(cols) + "\n")
            for r in out["rows"]:
                vals = []
                for c in cols:
                    x = r.get(c)
                    vals.append("" if x is None else
                                ('"' + x.replace('"', '""') + '"' if isinstance(x, str) else str(x)))
                f.write(",".join(vals) + "\n")
    sys.exit(0 if all_pass else 1)


if __name__ == "__main__":
    main()
