#!/usr/bin/env python3
"""The CUDA backend's performance model (docs/cuda.md, "Performance model"):
the expected time of one GPT-2 training step per kernel class on one GPU,
from FLOPs and bytes per kernel as the code is built and from the tile loops'
SASS instruction counts (bench/gpu/sass_loop_counts.py), and the MFU that
follows. Every assumption is a named constant below; a device's first
measurements replace them (tests/gpu/run_all.sh: gptx-bench-gpu,
gptx-bench-attention, gptx-op-profile --backend cuda).

    python3 bench/gpu/perf_model.py [--batch 64] [--seq 1024] [--graphs 1]
                                    [--old]    (the CUDA-core attention)

Plain Python 3, no packages; never run by CI.
"""
import argparse

# ---- the device: NVIDIA H200 SXM ------------------------------------------------------
PEAK_BF16 = 989e12    # dense bf16 tensor FLOP/s, datasheet
HBM = 4.8e12          # bytes/s, datasheet
COPY_MEASURED = 4.3e12   # device-to-device copy here, bytes read + written (KINDS.md, 2026-10-28)
GEMM_MEASURED = 788e12   # 8192^3 bf16 product through PyTorch on random data (KINDS.md)
SMS, CLOCK = 132, 1.98e9  # multiprocessors; SM clock under load (KINDS.md: 1980 MHz)
SMSP = 4                  # warp schedulers per SM, one instruction issued per clock each

# ---- assumptions (each to be replaced by a measurement) -------------------------------------
GEMM_EFF = 0.85      # cuBLASLt at the step's shapes, of GEMM_MEASURED (K = 768 and 3072)
BW_EFF = 0.85        # the bandwidth-bound kernels (16-byte accesses), of COPY_MEASURED
ISSUE_EFF = 0.60     # attention: achieved share of its issue bound (2 warps per scheduler:
                     # ldmatrix -> mma and ex2 latencies are only partly hidden)
LAUNCH_S = {0: 3e-6, 1: 1e-6}  # per kernel, without / with CUDA graphs

# ---- SASS of the attention tile loops (sm_90, nvcc 13.0; sass_loop_counts.py) ----------------
# instructions issued per warp per loop iteration, and (query, key) pairs per iteration
FLASH = {  # tensor cores: 16 rows x 64 keys (dK/dV: 16 keys x 64 queries) per warp-iteration
    "forward": (594, 1024), "backward_kv": (1053, 1024), "backward_q": (751, 1024)}
SIMT = {   # CUDA cores: one pair per thread, 32 per warp-iteration (the inner key loop)
    "forward": (265, 32), "backward_kv": (446, 32), "backward_q": (268, 32)}


def gpt2_124m(B, T):
    return dict(B=B, T=T, L=12, C=768, NH=12, V=50257, Vp=50304)


def matmuls(m):
    """(name, FLOPs per step): forward, and backward = 2x (dinp and dweight)."""
    N, C, L, Vp = m["B"] * m["T"], m["C"], m["L"], m["Vp"]
    per_layer = 2 * N * C * (3 * C + C + 4 * C + 4 * C)  # qkv, attn proj, fc, mlp proj
    head = 2 * N * C * Vp
    return [("products: blocks (qkv, proj, fc, proj)", 3 * L * per_layer),
            ("products: lm_head", 3 * head)]


def attention_pairs(m, tile=64):
    """(query, key) pairs the tensor-core kernels run per (b, h): whole 64x64 tiles up to the
    diagonal (a warp skips tiles wholly above its 16 rows, not the rest of the diagonal tile),
    and the pairs the CUDA-core kernels run (per warp of 32 rows: up to its last row)."""
    T = m["T"]
    ntiles = (T + tile - 1) // tile
    tc = sum((i + 1) for i in range(ntiles)) * tile * tile
    simt = sum(min(T, (w + 1) * 32) for w in range((T + 31) // 32)) * 32
    return tc, simt


def attention(m, old):
    counts = SIMT if old else FLASH
    tc, simt = attention_pairs(m)
    pairs = simt if old else tc
    heads = m["B"] * m["NH"] * m["L"]
    rows = []
    for k, (slots, per_iter) in counts.items():
        issue = pairs / per_iter * slots * heads  # warp instructions per step
        bound = issue / (SMSP * SMS * CLOCK)
        rows.append(("attention %s (%s)" % (k, "CUDA cores" if old else "tensor cores"),
                     bound / ISSUE_EFF, "issue bound %.2f ms at %d slots per %d pairs" %
                     (bound * 1e3, slots, per_iter)))
    return rows


def bandwidth(m):
    """(name, bytes per step) of the memory-bound kernels under bf16 mixed (activations 2 B,
    residual stream, parameters, gradients and moments 4 B); per layer and (row, column)."""
    N, C, L, Vp = m["B"] * m["T"], m["C"], m["L"], m["Vp"]
    P = 124_475_904  # parameters (padded vocabulary)
    e = N * C
    return [
        ("residual + LayerNorm fwd (x2 per layer)", L * e * 2 * (4 + 2 + 4 + 2)),
        ("attention fwd DRAM (qkv once, out)", L * e * (6 + 2)),
        ("attention bwd DRAM (D, qkv, dout, dqkv)", L * e * (4 + 12 + 4 + 6)),
        ("LayerNorm bwd (x2: rows, column sums)", L * e * 2 * (2 + 4 + 8 + 6)),
        ("residual gradient's bf16 copy (x2, in LN bwd)", L * e * 2 * 2),
        ("bias gradients (column sums of dout)", L * e * 2 * (3 + 1 + 4 + 1)),
        ("ln_f fwd + bwd, embedding fwd + bwd", e * (6 + 20 + 12 + 8)),
        ("cross-entropy fused (read + write logits)", N * Vp * 4),
        ("AdamW + bf16 weight copy, zero_grad, norm", P * (4 * 4 + 3 * 4 + 2 + 4 + 4)),
    ]


def kernels_per_step(m):
    return m["L"] * 20 + 20  # about 20 launches per layer (products, LN, attention, sums)


def model_flops(m):
    """What MFU counts (gptx-bench-gpu's formula): 6 P_mat + 6 L T C per token."""
    L, C, T, Vp = m["L"], m["C"], m["T"], m["Vp"]
    p_mat = L * 12 * C * C + C * Vp
    return (6 * p_mat + 6 * L * T * C) * m["B"] * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--graphs", type=int, default=1)
    ap.add_argument("--old", action="store_true", help="the CUDA-core attention kernels")
    a = ap.parse_args()
    m = gpt2_124m(a.batch, a.seq)
    rows = []
    for name, fl in matmuls(m):
        rate = GEMM_EFF * GEMM_MEASURED
        rows.append((name, fl / rate, "%.2f TFLOP at %.0f TFLOP/s" % (fl / 1e12, rate / 1e12)))
    rows += attention(m, a.old)
    bw = BW_EFF * COPY_MEASURED
    for name, by in bandwidth(m):
        rows.append((name, by / bw, "%.2f GB at %.2f TB/s" % (by / 1e9, bw / 1e12)))
    nk = kernels_per_step(m)
    rows.append(("launch gaps", nk * LAUNCH_S[a.graphs], "%d kernels x %.0f us" %
                 (nk, LAUNCH_S[a.graphs] * 1e6)))
    total = sum(t for _, t, _ in rows)
    print("GPT-2 124M, B %d, T %d, bf16 mixed, H200 (%s attention, graphs %s)" %
          (a.batch, a.seq, "CUDA-core" if a.old else "tensor-core", "on" if a.graphs else "off"))
    print("%-46s %9s %7s  %s" % ("kernel class", "ms/step", "share", "from"))
    for name, t, why in rows:
        print("%-46s %9.2f %6.1f%%  %s" % (name, t * 1e3, 100 * t / total, why))
    mf = model_flops(m)
    tok = a.batch * a.seq
    print("%-46s %9.2f" % ("step", total * 1e3))
    print("model FLOPs %.1f TFLOP per step; %.0f tokens/s; MFU %.1f %% of %.0f TFLOP/s" %
          (mf / 1e12, tok / total, 100 * mf / total / PEAK_BF16, PEAK_BF16 / 1e12))


if __name__ == "__main__":
    main()
