#!/usr/bin/env python3
"""The CUDA backend's performance model (docs/cuda.md, "Performance model"):
the time of one GPT-2 124M training step per kernel class on an H200, from
FLOPs and bytes per kernel as the code is built and the attention tile loops'
SASS instruction counts (bench/gpu/sass_loop_counts.py), held against what two
leases of an H200 measured, and what the next steps of speed would take.

    python3 bench/gpu/perf_model.py              the whole report (below)
    python3 bench/gpu/perf_model.py --prior [--batch 64] [--seq 1024] [--graphs 1] [--old]
                                                 the model as built alone (--old: the
                                                 CUDA-core attention kernels)
    python3 bench/gpu/perf_model.py --check      exit 1 when the measurements and the
                                                 ladder no longer agree

The report: (1) what was measured, per system, in each lease; (2) per op
class at B 64, the model as built (the PRIOR assumptions) against the second
lease's op profile, and the B 8 figures against the first lease's; (3) the
ladder from the measured B 64 step: what the next 10 % of tokens/s and the
50 % MFU goal would take. Every number under MEASURED / LEASE2 was measured on
the lent H200 (the first lease's quoted from issue 33); everything else is a
prediction of this model.

Plain Python 3, no packages; CI runs --check only (perf_model_check, label unit).
"""
import argparse
import sys

# ---- the device: NVIDIA H200 SXM ------------------------------------------------------
PEAK_BF16 = 989e12    # dense bf16 tensor FLOP/s, datasheet: what MFU is of
COPY_MEASURED = 4.3e12   # device-to-device copy, bytes read + written (KINDS.md, 2026-10-28)
GEMM_MEASURED = 788e12   # 8192^3 bf16 product through PyTorch on random data (KINDS.md)
SMS, CLOCK = 132, 1.98e9  # multiprocessors; SM clock under load (KINDS.md: 1980 MHz)
SMSP = 4                  # warp schedulers per SM, one instruction issued per clock each

# ---- the model's assumptions as built (PRIOR: before any measurement) -----------------------
GEMM_EFF = 0.85      # cuBLASLt at the step's shapes, of GEMM_MEASURED (K = 768 and 3072)
BW_EFF = 0.85        # the bandwidth-bound kernels (16-byte accesses), of COPY_MEASURED
ISSUE_EFF = 0.60     # attention: achieved share of its issue bound
LAUNCH_S = {0: 3e-6, 1: 1e-6}  # per kernel, without / with CUDA graphs

# ---- SASS of the attention tile loops (sm_90, nvcc 13.0; sass_loop_counts.py) ----------------
# instructions issued per warp per loop iteration, and (query, key) pairs per iteration
FLASH = {  # tensor cores: 16 rows x 64 keys (dK/dV: 16 keys x 64 queries) per warp-iteration
    "forward": (594, 1024), "backward_kv": (1053, 1024), "backward_q": (751, 1024)}
SIMT = {   # CUDA cores: one pair per thread, 32 per warp-iteration (the inner key loop)
    "forward": (265, 32), "backward_kv": (446, 32), "backward_q": (268, 32)}

# ---- MEASURED: the first lease of an H200 (issue 33), tests/gpu/run_all.sh twice from 523c4e1;
# driver 580.159, nvcc 13.0, PyTorch 2.11, cuDNN 9.19. GPT-2 124M, T 1024, bf16 unless named.
MEASURED = {
    # tokens/s at B 64 (run 1, run 2 where there were two)
    "systems_b64": [
        ("gptx bf16 (graphs off / on alike)", (445405, 450523)),
        ("PyTorch 2.11 torch.compile", (472050, 477381)),
        ("llm.c master, cuDNN 9.19 attention", (515072,)),
        ("llm.c master, its own attention", (347458,)),
        ("PyTorch 2.11 eager", (344869, 345981)),
        ("gptx tf32", (85576,)),
        ("gptx fp32", (42963,)),
    ],
    # gptx-op-profile --backend cuda --config gpt2-124M --precision bf16 (B 8): wall clock per
    # step with an event pair around every op (the rest of that lease: docs/cuda.md, issue 33)
    "profile_b8_step_s": 0.0311,
    "ln_backward_act_b8_s": 6.93e-3,   # 24 calls a step
    "backward_products_b8_tflops": (130, 313),  # with their bias gradients' column sums
}

# ---- MEASURED: the second lease (2026-12-04), the last of its calls: tests/gpu/run_all.sh from
# 3a96614 (29 of 29 stages passed); same driver, nvcc, PyTorch and cuDNN. One call.
LEASE2 = {
    "systems_b64": [
        ("gptx bf16 (graphs off / on)", (495664, 496175)),
        ("PyTorch 2.11 torch.compile", (477075,)),
        ("llm.c master, cuDNN 9.19 attention", (483230,)),
        ("llm.c master, its own attention", (340821,)),
        ("PyTorch 2.11 eager", (344625,)),
        ("gptx tf32", (205839,)),
        ("gptx fp32", (43251,)),
    ],
    "gptx_step_b64_s": 0.1321,          # graphs on, median of 5
    # gptx-op-profile --batch 64 (graphs off, an event pair around every op): ms per step
    "profile_b64_step_s": 0.1332,
    "profile_b64_ms": {
        "products (bias, and GELU where fused, included)": 74.37,
        "attention forward": 6.68,
        "attention backward": 29.30,
        "LayerNorm (with the residual add it fuses)": 14.23,
        "cross-entropy and loss sum": 6.37,
        "gradient norm and AdamW": 1.12,
        "embedding": 0.49,
        "elementwise (GELU, residual, residual to act)": 0.12,
        "copies and fills (ids, zero_grad, weight copy)": 0.23,
        "outside the ops": 0.33,
    },
    "backward_products_b64_ms": 50.19,  # the five backward product rows of that profile
    "profile_b8_step_s": 0.0200,
    "ln_backward_act_b8_s": 1.37e-3,    # 24 calls (issue 33 found 6.93 ms)
    "backward_products_b8_ms": 7.25,
    # gptx-bench-attention, B 8, H 12, T 1024, head 64: useful causal FLOPs
    "attention_forward_tflops": 149.7,
    "attention_backward_tflops": 79.4,
}

GOAL_MFU = 0.50
GOALS = {"attention forward": 300e12, "attention backward": 180e12}
PRODUCTS_NEXT = 700e12  # 89 % of the 788 TFLOP/s an 8192^3 product reached on such a machine
BW_NEXT_RATIO = 1.2     # LayerNorm and cross-entropy: time over bytes / copy ceiling, next
COPY_LEASE2 = 4.263e12  # gptx-bench-bandwidth's device-to-device copy, second lease


def gpt2_124m(B, T=1024):
    return dict(B=B, T=T, L=12, C=768, NH=12, V=50257, Vp=50304)


def model_flops(m):
    """What MFU counts (gptx-bench-gpu's formula): 6 P_mat + 6 L T C per token."""
    L, C, T, Vp = m["L"], m["C"], m["T"], m["Vp"]
    p_mat = L * 12 * C * C + C * Vp
    return (6 * p_mat + 6 * L * T * C) * m["B"] * T


def product_flops(m):
    """(forward, backward) FLOPs of the products per step (backward = dinp + dweight)."""
    N, C, L, Vp = m["B"] * m["T"], m["C"], m["L"], m["Vp"]
    fwd = L * 2 * N * C * (3 * C + C + 4 * C + 4 * C) + 2 * N * C * Vp
    return fwd, 2 * fwd


def attention_flops(m):
    """Useful causal FLOPs (gptx-bench-attention's count): forward, backward."""
    T = m["T"]
    fwd = 4.0 * m["B"] * m["NH"] * (m["C"] // m["NH"]) * T * (T + 1) / 2 * m["L"]
    return fwd, 2 * fwd


def attention_pairs(m, tile=64):
    """(query, key) pairs the tensor-core kernels run per (b, h): whole 64x64 tiles up to the
    diagonal, and the pairs the CUDA-core kernels run (per warp of 32 rows: up to its last)."""
    T = m["T"]
    ntiles = (T + tile - 1) // tile
    tc = sum((i + 1) for i in range(ntiles)) * tile * tile
    simt = sum(min(T, (w + 1) * 32) for w in range((T + 31) // 32)) * 32
    return tc, simt


def attention_issue_s(m, old=False):
    """Issue-bound seconds per kernel (forward, backward_kv, backward_q)."""
    counts = SIMT if old else FLASH
    tc, simt = attention_pairs(m)
    pairs = simt if old else tc
    heads = m["B"] * m["NH"] * m["L"]
    return {k: pairs / per * slots * heads / (SMSP * SMS * CLOCK)
            for k, (slots, per) in counts.items()}


def bandwidth_bytes(m):
    """(name, bytes per step) of the memory-bound kernels under bf16 mixed (activations 2 B,
    residual stream, parameters, gradients and moments 4 B); per layer and (row, column)."""
    N, C, L = m["B"] * m["T"], m["C"], m["L"]
    P = 124_475_904  # parameters (padded vocabulary)
    e = N * C
    return [
        ("residual + LayerNorm fwd (x2 per layer)", L * e * 2 * (4 + 2 + 4 + 2)),
        ("attention fwd DRAM (qkv once, out)", L * e * (6 + 2)),
        ("attention bwd DRAM (D, qkv, dout, dqkv)", L * e * (4 + 12 + 4 + 6)),
        # dout, input, dinp read and written; dw, db summed in the same pass (issue 33:
        # the separate column sums read dout and the input again, 6 B more)
        ("LayerNorm bwd (x2: rows, column sums fused)", L * e * 2 * (2 + 4 + 8)),
        ("residual gradient's bf16 copy (x2, in LN bwd)", L * e * 2 * 2),
        ("bias gradients (column sums of dout)", L * e * 2 * (3 + 1 + 4 + 1)),
        ("ln_f fwd + bwd, embedding fwd + bwd", e * (6 + 20 + 12 + 8)),
        ("cross-entropy fused (read + write logits)", N * m["Vp"] * 4),
        ("AdamW + bf16 weight copy, zero_grad, norm", P * (4 * 4 + 3 * 4 + 2 + 4 + 4)),
    ]


def kernels_per_step(m):
    return m["L"] * 20 + 20  # about 20 launches per layer (products, LN, attention, sums)


# ---- the model as built ---------------------------------------------------------------------

def prior_rows(m, graphs=1, old=False):
    """(class, seconds, how) of the model with its PRIOR assumptions."""
    rate = GEMM_EFF * GEMM_MEASURED
    fwd, bwd = product_flops(m)
    rows = [("products forward", fwd / rate, "%.2f TFLOP at %.0f TFLOP/s" % (fwd / 1e12, rate / 1e12)),
            ("products backward (bias sums apart)", bwd / rate,
             "%.2f TFLOP at %.0f TFLOP/s" % (bwd / 1e12, rate / 1e12))]
    kind = "CUDA cores" if old else "tensor cores"
    for k, s in attention_issue_s(m, old).items():
        rows.append(("attention %s (%s)" % (k, kind), s / ISSUE_EFF,
                     "issue bound %.2f ms / %.2f" % (s * 1e3, ISSUE_EFF)))
    bw = BW_EFF * COPY_MEASURED
    for name, by in bandwidth_bytes(m):
        rows.append((name, by / bw, "%.2f GB at %.2f TB/s" % (by / 1e9, bw / 1e12)))
    nk = kernels_per_step(m)
    rows.append(("launch gaps", nk * LAUNCH_S[graphs], "%d kernels x %.0f us" %
                 (nk, LAUNCH_S[graphs] * 1e6)))
    return rows


def print_rows(title, rows, m):
    total = sum(t for _, t, _ in rows)
    print(title)
    print("%-46s %9s %7s  %s" % ("kernel class", "ms/step", "share", "from"))
    for name, t, why in rows:
        print("%-46s %9.2f %6.1f%%  %s" % (name, t * 1e3, 100 * t / total, why))
    mf, tok = model_flops(m), m["B"] * m["T"]
    print("%-46s %9.2f" % ("step", total * 1e3))
    print("model FLOPs %.1f TFLOP per step; %.0f tokens/s; MFU %.1f %% of %.0f TFLOP/s" %
          (mf / 1e12, tok / total, 100 * mf / total / PEAK_BF16, PEAK_BF16 / 1e12))
    return total


# ---- the report -------------------------------------------------------------------------------

def mfu(m, seconds):
    return model_flops(m) / seconds / PEAK_BF16


def report_measured():
    print("== 1. MEASURED on the H200: GPT-2 124M, B 64, T 1024, bf16 unless named; each table one call")
    fpt = model_flops(gpt2_124m(1)) / 1024
    for title, runs_of in (("first lease (issue 33, from 523c4e1)", MEASURED["systems_b64"]),
                           ("second lease (2026-12-04, its last call, from 3a96614)", LEASE2["systems_b64"])):
        print("-- " + title)
        print("%-40s %20s %9s %8s" % ("system", "tokens/s", "ms/step", "MFU"))
        for name, runs in runs_of:
            tok = max(runs)
            print("%-40s %20s %9.1f %7.1f%%" % (name, " / ".join("%d" % r for r in runs),
                                                65536 / tok * 1e3, 100 * fpt * tok / PEAK_BF16))
    print()


# the prior model's classes (prior_rows) gathered as gptx-op-profile groups them
CLASS_OF = [
    ("products", ("products", "bias gradients")),
    ("attention forward", ("attention forward", "attention fwd")),
    ("attention backward", ("attention backward", "attention bwd")),
    ("LayerNorm, embedding, elementwise", ("residual + LayerNorm", "LayerNorm bwd",
                                           "residual gradient", "ln_f")),
    ("cross-entropy", ("cross-entropy",)),
    ("gradient norm, AdamW, zero_grad", ("AdamW",)),
    ("launch gaps / outside the ops", ("launch gaps",)),
]


def measured_classes():
    """LEASE2's B 64 op profile in CLASS_OF's classes (ms)."""
    g = LEASE2["profile_b64_ms"]
    pick = lambda *keys: sum(v for k, v in g.items() if k.startswith(keys))
    return {
        "products": pick("products"),
        "attention forward": pick("attention forward"),
        "attention backward": pick("attention backward"),
        "LayerNorm, embedding, elementwise": pick("LayerNorm", "embedding", "elementwise"),
        "cross-entropy": pick("cross-entropy"),
        "gradient norm, AdamW, zero_grad": pick("gradient norm", "copies"),
        "launch gaps / outside the ops": pick("outside"),
    }


def prior_classes(m):
    out = {c: 0.0 for c, _ in CLASS_OF}
    for name, t, _ in prior_rows(m, graphs=0):
        for c, prefixes in CLASS_OF:
            if name.startswith(prefixes):
                out[c] += t * 1e3
                break
        else:
            raise SystemExit("perf_model: class of '%s' unknown" % name)
    return out


def report_classes():
    print("== 2. per op class at B 64: the model as built (PREDICTED, prior assumptions) against the")
    print("   second lease's op profile (MEASURED, graphs off, an event pair around every op)")
    m = gpt2_124m(64)
    pred, meas = prior_classes(m), measured_classes()
    print("%-40s %12s %12s %8s" % ("class", "predicted ms", "measured ms", "ratio"))
    for c, _ in CLASS_OF:
        print("%-40s %12.2f %12.2f %7.2fx" % (c, pred[c], meas[c], meas[c] / pred[c]))
    tp, tm = sum(pred.values()), sum(meas.values())
    print("%-40s %12.2f %12.2f %7.2fx" % ("step", tp, tm, tm / tp))
    fwd, bwd = product_flops(m)
    print("products %.0f TFLOP/s (backward alone %.0f; B 8 backward %.0f: issue 33 found %d-%d)"
          % ((fwd + bwd) / meas["products"] / 1e9, bwd / LEASE2["backward_products_b64_ms"] / 1e9,
             product_flops(gpt2_124m(8))[1] / LEASE2["backward_products_b8_ms"] / 1e9,
             *MEASURED["backward_products_b8_tflops"]))
    print("B 8 step %.1f ms (issue 33: %.1f); layernorm_backward_act %.2f ms a step (issue 33: %.2f)"
          % (LEASE2["profile_b8_step_s"] * 1e3, MEASURED["profile_b8_step_s"] * 1e3,
             LEASE2["ln_backward_act_b8_s"] * 1e3, MEASURED["ln_backward_act_b8_s"] * 1e3))
    print()
    return meas


def memory_floor_ms(m, prefixes):
    by = sum(b for n, b in bandwidth_bytes(m) if n.startswith(prefixes))
    return by / COPY_LEASE2 * 1e3


def ladder_steps(m, meas):
    """(change, ms saved) in order, from the MEASURED B 64 classes."""
    f, b = attention_flops(m)
    fwd, bwd = product_flops(m)
    ln_floor = memory_floor_ms(m, ("residual + LayerNorm", "LayerNorm bwd", "residual gradient",
                                   "ln_f"))
    ce_floor = memory_floor_ms(m, ("cross-entropy",))
    ln, ce = meas["LayerNorm, embedding, elementwise"], meas["cross-entropy"]
    return [
        ("attention backward at the goal, %d TFLOP/s (from %.0f)"
         % (GOALS["attention backward"] / 1e12, LEASE2["attention_backward_tflops"]),
         meas["attention backward"] * (1 - LEASE2["attention_backward_tflops"] * 1e12
                                       / GOALS["attention backward"])),
        ("attention forward at the goal, %d TFLOP/s (from %.0f)"
         % (GOALS["attention forward"] / 1e12, LEASE2["attention_forward_tflops"]),
         meas["attention forward"] * (1 - LEASE2["attention_forward_tflops"] * 1e12
                                      / GOALS["attention forward"])),
        ("every product (bias sums included) at %d TFLOP/s (from %.0f)"
         % (PRODUCTS_NEXT / 1e12, (fwd + bwd) / meas["products"] / 1e9),
         meas["products"] - (fwd + bwd) / PRODUCTS_NEXT * 1e3),
        ("LayerNorm and cross-entropy at %.1fx their bytes / copy (from %.1fx, %.1fx)"
         % (BW_NEXT_RATIO, ln / ln_floor, ce / ce_floor),
         ln - BW_NEXT_RATIO * ln_floor + ce - BW_NEXT_RATIO * ce_floor),
    ]


def report_ladder(meas):
    m = gpt2_124m(64)
    step = LEASE2["gptx_step_b64_s"] * 1e3
    print("== 3. what the next steps would take (B 64, from the MEASURED %.1f ms, graphs on, MFU %.1f %%)"
          % (step, 100 * mfu(m, step / 1e3)))
    print("%-70s %8s %10s %7s" % ("change (in order, each on the ones before)", "ms/step",
                                  "tokens/s", "MFU"))
    t = step
    print("%-70s %8.1f %10.0f %6.1f%%" % ("measured", t, 65536e3 / t, 100 * mfu(m, t / 1e3)))
    for name, saved in ladder_steps(m, meas):
        t -= saved
        print("%-70s %8.1f %10.0f %6.1f%%" % (name, t, 65536e3 / t, 100 * mfu(m, t / 1e3)))
    ten = step / 1.1
    att_b, rate_b = meas["attention backward"], LEASE2["attention_backward_tflops"]
    need = att_b - (step - ten)  # the attention backward's time that gives it alone
    print("the next 10 %% of tokens/s: %.1f ms/step, %.1f ms less: attention backward at %.0f "
          "TFLOP/s (from %.0f) alone gives it" % (ten, step - ten, rate_b * att_b / need, rate_b))
    goal = model_flops(m) / (GOAL_MFU * PEAK_BF16) * 1e3
    print("50 %% MFU: %.1f ms/step (%.0f tokens/s), %.1f ms less than measured"
          % (goal, 65536e3 / goal, step - goal))
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prior", action="store_true", help="the model as built alone")
    ap.add_argument("--check", action="store_true", help="the calibration still holds")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--graphs", type=int, default=1)
    ap.add_argument("--old", action="store_true", help="the CUDA-core attention kernels")
    a = ap.parse_args()
    if a.prior:
        m = gpt2_124m(a.batch, a.seq)
        print_rows("GPT-2 124M, B %d, T %d, bf16 mixed, H200 (%s attention, graphs %s), PREDICTED"
                   % (a.batch, a.seq, "CUDA-core" if a.old else "tensor-core",
                      "on" if a.graphs else "off"), prior_rows(m, a.graphs, a.old), m)
        return 0
    report_measured()
    meas = report_classes()
    best = report_ladder(meas)
    if a.check:
        # the profile's classes add up to its step, the benchmark's step agrees with the
        # profile's (graphs on vs off, within 3 %), and the ladder reaches the 50 % goal: else a
        # measurement or a constant changed without the other
        m = gpt2_124m(64)
        total = sum(meas.values())
        prof, bench = LEASE2["profile_b64_step_s"] * 1e3, LEASE2["gptx_step_b64_s"] * 1e3
        ok = (abs(total - prof) <= 0.5 and abs(prof - bench) / bench <= 0.03
              and mfu(m, best / 1e3) >= GOAL_MFU)
        print("check: op classes %.1f ms against the profile's step %.1f, the benchmark's %.1f, "
              "ladder to %.1f %% MFU: %s" % (total, prof, bench, 100 * mfu(m, best / 1e3),
                                            "ok" if ok else "FAILED"))
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
