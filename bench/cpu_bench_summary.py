#!/usr/bin/env python3
"""Markdown summary of bench/run_cpu_bench.sh's JSON results (standard library only).

Usage: cpu_bench_summary.py OUT_DIR ROUNDS "fp32 bf16 bf16_pure" "eager autocast ..."

Every gptx run is set against the mean of its two bracketing reference runs
(OpenBLAS sgemm for fp32, oneDNN's bf16 matmul for the bf16 policies); the
medians over rounds give the ratios and the speed goals of docs/benchmarks.md.
Every figure is also given as % of the machine's peak (gptx-bench-peak's
peak.json): fp32 figures against the fp32 FMA peak, bf16 ones against the
AVX512_BF16 peak, "—" where the CPU has none.
"""
import json
import os
import statistics
import sys

d, rounds = sys.argv[1], int(sys.argv[2])
precisions = sys.argv[3].split()
variants = sys.argv[4].split() if len(sys.argv) > 4 else []
CONFIGS = ("small", "gpt2-124M-short")
MiB = 2.0 ** 20


def load(name):
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def median_run(runs):
    """The run of median throughput (lower median for an even count)."""
    runs = sorted(runs, key=lambda x: x["tokens_per_s"])
    return runs[(len(runs) - 1) // 2]


machine = load("machine") or {}
peak = load("peak") or {}
PEAK = {"fp32": peak.get("fp32_peak_gflops"), "bf16": peak.get("bf16_peak_gflops")}


def pct_peak(gflops, kind):
    """gflops as "% of peak" of kind (fp32|bf16), or "—" without that peak."""
    p = PEAK.get(kind)
    return f"{100 * gflops / p:.1f} %" if p else "—"


REF_NAME = {"fp32": "OpenBLAS sgemm", "bf16": "oneDNN bf16 matmul"}
first = None
print(f"## CPU benchmark summary\n")
print(f"Machine: {machine.get('model', '?')}, {machine.get('nproc', '?')} online CPUs, "
      f"ISA: {machine.get('isa') or 'no avx512_bf16/amx_bf16'}.\n")

# the peak and the reference products against it
if peak:
    b = peak.get("bf16_peak_gflops")
    print(f"Peak (gptx-bench-peak, {peak['threads']} threads): fp32 {peak['fp32_isa']} FMA "
          f"{peak['fp32_peak_gflops']:.1f} GFLOP/s ({peak['fp32_peak_1t_gflops']:.1f} on one "
          f"thread); bf16 " + (f"vdpbf16ps {b:.1f} GFLOP/s ({peak['bf16_peak_1t_gflops']:.1f} on "
                               f"one thread)" if b else "not present") +
          f"; AMX-BF16 {peak.get('amx_bf16', '?')}.\n")
else:
    print("Peak: no peak.json in the results (gptx-bench-peak did not run): \"% of peak\" is "
          "\"—\".\n")
print("| reference product, 2048^3 | GFLOP/s | % of peak | library |")
print("|---|---:|---:|---|")
for name, what, kind in (("openblas-configured", "OpenBLAS sgemm, environment as given "
                          f"({machine.get('openblas_env') or 'no OPENBLAS_CORETYPE/L2_SIZE'})",
                          "fp32"),
                         ("openblas-native", "OpenBLAS sgemm, `env -u OPENBLAS_CORETYPE "
                          "-u OPENBLAS_L2_SIZE`", "fp32"),
                         ("onednn-fp32", "oneDNN fp32 matmul (gptx-bench-sgemm --lib onednn)",
                          "fp32"),
                         ("bf16-matmul", "oneDNN bf16 matmul (gptx-bench-bf16gemm)", "bf16")):
    r = load("ref-" + name)
    if r:
        lib = r.get("openblas_config") or r.get("onednn") or r.get("library") or r.get("kernel") or ""
        print(f"| {what} | {r['gflops']:.1f} | {pct_peak(r['gflops'], kind)} | {lib} |")
    else:
        print(f"| {what} | not measured | — | |")
print()

# every gptx run against its bracketing reference
print("| config | policy | round | tokens/s | model GFLOP/s | reference before / after "
      "| % of reference | % of peak |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
runs, shares, refs = {}, {}, {"fp32": [], "bf16": []}
for cfg in CONFIGS:
    for p in precisions:
        kind = "fp32" if p == "fp32" else "bf16"
        for r in range(1, rounds + 1):
            tag = f"{cfg}-{p}-{r}"
            g = load("gptx-" + tag)
            b, a = load(f"ref-{tag}-before"), load(f"ref-{tag}-after")
            if g is None or b is None or a is None:
                continue
            first = first or g
            refs[kind] += [b["gflops"], a["gflops"]]
            ref = (b["gflops"] + a["gflops"]) / 2
            share = 100 * g["gflops"] / ref
            runs.setdefault((cfg, p), []).append(g)
            shares.setdefault((cfg, p), []).append(share)
            print(f"| {cfg} | {p} | {r} | {g['tokens_per_s']:.0f} | {g['gflops']:.1f} "
                  f"| {b['gflops']:.0f} / {a['gflops']:.0f} ({REF_NAME[kind]}) | {share:.1f} % "
                  f"| {pct_peak(g['gflops'], kind)} |")
print()
if first is None:
    sys.exit("cpu_bench_summary.py: no gptx results in " + d)
for kind, rates in refs.items():
    if rates:
        print(f"- {REF_NAME[kind]} 2048^3, {first['threads']} threads: "
              f"{min(rates):.0f}-{max(rates):.0f} GFLOP/s over the run "
              f"(median {statistics.median(rates):.0f}, "
              f"{pct_peak(statistics.median(rates), kind)} of the {kind} peak)")
for (cfg, p), g in runs.items():
    if g[0]["precision"] != "fp32":
        print(f"- {cfg} {p}: products by {g[0]['products']}; bf16 in hardware: "
              f"{'yes' if g[0]['bf16_native'] else 'NO: the policy ran emulated'}")
print()

# torch variants
torch = {}
for cfg in CONFIGS:
    for v in variants:
        t = load(f"torch-{cfg}-{v}")
        if t:
            torch[(cfg, v)] = t
if torch:
    tver = next(iter(torch.values()))["version"]
    print(f"PyTorch {tver} (same model and step, bench/torch_bench_train.py):\n")
    print("| config | variant | tokens/s | model GFLOP/s | % of peak | cold first step "
          "| max RSS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (cfg, v), t in torch.items():
        kind = "bf16" if "autocast" in v else "fp32"  # autocast: bf16 products
        print(f"| {cfg} | {t['variant']} | {t['tokens_per_s']:.0f} | {t['gflops']:.1f} "
              f"| {pct_peak(t['gflops'], kind)} "
              f"| {t['cold_step_s']:.2f} s | {t['max_rss_bytes'] / MiB:.0f} MiB |")
    print()

# medians, ratios, goals
print("Medians over rounds:\n")
print("| config | policy | tokens/s | vs gptx fp32 | vs fastest PyTorch | % of reference "
      "| % of peak | median step | cold first step | peak memory (library) | max RSS |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
goals = []
for cfg in CONFIGS:
    fastest = max((t for (c, _), t in torch.items() if c == cfg),
                  key=lambda t: t["tokens_per_s"], default=None)
    base = runs.get((cfg, "fp32"))
    base_tok = median_run(base)["tokens_per_s"] if base else None
    for p in precisions:
        if (cfg, p) not in runs:
            continue
        g = median_run(runs[(cfg, p)])
        vs32 = f"{g['tokens_per_s'] / base_tok:.2f}x" if base_tok else "-"
        vst = f"{g['tokens_per_s'] / fastest['tokens_per_s']:.2f}x" if fastest else "-"
        share = statistics.median(shares[(cfg, p)])
        kind = "fp32" if p == "fp32" else "bf16"
        print(f"| {cfg} (B{g['batch']} T{g['seq']}) | {p} | {g['tokens_per_s']:.0f} | {vs32} "
              f"| {vst} | {share:.1f} % | {pct_peak(g['gflops'], kind)} "
              f"| {g['step_median_s']:.3f} s | {g['cold_step_s']:.3f} s "
              f"| {g['mem_peak_bytes'] / MiB:.0f} MiB | {g['max_rss_bytes'] / MiB:.0f} MiB |")
        if p == "fp32" and cfg == "gpt2-124M-short" and PEAK["fp32"]:
            x = 100 * g["gflops"] / PEAK["fp32"]
            goals.append(f"{cfg}: fp32 step at {x:.1f} % of the fp32 peak (issue 27 goal 75 %: "
                         f"{'met' if x >= 75 else 'NOT met'})")
        if p == "bf16":
            if base_tok:
                x = g["tokens_per_s"] / base_tok
                goals.append(f"{cfg}: bf16 / fp32 = {x:.2f}x (goal 1.6x: "
                             f"{'met' if x >= 1.6 else 'NOT met'})")
            if fastest:
                x = g["tokens_per_s"] / fastest["tokens_per_s"]
                goals.append(f"{cfg}: bf16 / fastest PyTorch ({fastest['variant']}, "
                             f"{fastest['tokens_per_s']:.0f} tokens/s) = {x:.2f}x "
                             f"(goal 1.3x: {'met' if x >= 1.3 else 'NOT met'})")
            goals.append(f"{cfg}: bf16 at {share:.1f} % of the bracketing bf16 matmul rate "
                         f"(goal 70 %: {'met' if share >= 70 else 'NOT met'})")
print()
if goals:
    print("Speed goals (issue 13, bf16 policy; issue 27, fp32 against the peak):\n")
    for line in goals:
        print("- " + line)
    print()

print("Products alone (gptx-bench-gemm-ceiling, fp32 OpenBLAS: the weight products of one step, "
      "back to back, nothing else):\n")
print("| config | OpenBLAS threads | % of peak | split by the pool (as gptx) | % of peak |")
print("|---|---:|---:|---:|---:|")
for cfg in CONFIGS:
    c = load("ceiling-" + cfg)
    if c:
        o, sp = c["ceiling_openblas_threads_gflops"], c["ceiling_split_gflops"]
        print(f"| {cfg} | {o:.1f} GFLOP/s | {pct_peak(o, 'fp32')} "
              f"| {sp:.1f} GFLOP/s | {pct_peak(sp, 'fp32')} |")
print()
for (cfg, p), rs in runs.items():
    g = rs[0]
    ph = g["phase_median_s"]
    parts = ", ".join(f"{k} {v:.3f} s ({100 * v / g['step_median_s']:.0f} %)"
                      for k, v in ph.items())
    print(f"- gptx {cfg} {p} step phases (round 1, medians): {parts}")
