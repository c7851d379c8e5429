#!/usr/bin/env python3
"""The figures a device call's summary prints, from the benchmarks' JSON
(tests/gpu/run_all.sh and profile_call.sh; plain Python 3, no packages).

  bench_figures.py figure FILE     one line for one benchmark's JSON
  bench_figures.py peers DIR       the summary's lines on bitwise repeatability and on
                                   gptx against torch.compile and llm.c, from DIR/*.json
  bench_figures.py ncu FILE        a table of the kernels Nsight Compute profiled, from
                                   its text report (the details page)
"""
import json
import os
import re
import sys

PEAK = 989e12          # dense bf16 FLOP/s: the MFU every benchmark here uses
GOAL_MFU = 0.50        # issue 33
GOAL_VS_COMPILE = 1.3  # gptx over torch.compile, the same call
GOAL_VS_LLMC = 1.2     # gptx over llm.c with cuDNN attention, the same call


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def figure(r):
    kind = r.get("bench") or r.get("implementation")
    if kind == "attention":
        t, c = r["tensor_cores"], r["cuda_cores"]
        return ("TFLOP/s fwd/bwd: tensor cores %.1f/%.1f, CUDA cores %.1f/%.1f; speed-up %.1fx/%.1fx"
                % (t["forward_tflops"], t["backward_tflops"], c["forward_tflops"],
                   c["backward_tflops"], r["speedup_forward"], r["speedup_backward"]))
    if kind == "bandwidth":
        ops = r["ops"]
        over = [o for o in ops if o["ratio"] > r["goal_ratio"]]
        worst = max(ops, key=lambda o: o["ratio"]) if ops else None
        head = "copy %.0f GB/s; %d of %d within %.1fx" % (
            r["copy_bytes_per_s"] * 1e-9, len(ops) - len(over), len(ops), r["goal_ratio"])
        if worst:
            head += "; worst %s B %d %.1fx" % (worst["op"], worst["batch"], worst["ratio"])
        return head
    if kind == "llm.c":
        return "llm.c (%s attention) batch %d: %.0f tok/s, %.1f ms/step (mean of %d steps)" % (
            r["attention"], r["batch"], r["tokens_per_s"], r["step_ms_mean"], r["steps_averaged"])
    line = "batch %d: %.0f tok/s, MFU %.1f %%, median %.1f ms/step, cold step %.2f s" % (
        r["batch"], r["tokens_per_s"], 100 * r["mfu"], r["step_median_s"] * 1e3, r["cold_step_s"])
    rep = r.get("bitwise_repeatable")
    if rep is not None:
        line += "; bitwise repeatable: %s" % ("yes" if rep else "NO")
    return line


def peers(d):
    """Two lines: repeatability, and the side-by-side of B 64 bf16."""
    runs = {n[:-5]: load(os.path.join(d, n)) for n in sorted(os.listdir(d)) if n.endswith(".json")}
    runs = {k: v for k, v in runs.items() if v}
    gx = {k: v for k, v in runs.items() if v.get("implementation") == "gptx"}
    checked = {k: v["bitwise_repeatable"] for k, v in gx.items()
               if v.get("bitwise_repeatable") is not None}
    if not checked:
        rep = "not checked (no gptx-bench-gpu run with --repeat 1 finished)"
    elif all(checked.values()):
        rep = "yes (%s: a second run from the same init gave the same losses and parameters, " \
              "bit for bit; no peer offers that)" % ", ".join(sorted(checked))
    else:
        rep = "NO (%s)" % ", ".join(k for k, v in sorted(checked.items()) if not v)
    best = max((v for k, v in gx.items() if k.startswith("bench_bf16_b64")),
               key=lambda v: v["tokens_per_s"], default=None)
    tc, ll = runs.get("torch_compile_b64"), runs.get("llmc_cudnn")
    if not best:
        return rep, "not measured (no gptx bf16 batch 64 run finished)"
    g = best["tokens_per_s"]
    parts = ["gptx %.0f (graphs %s, MFU %.1f %%, goal %.0f %%)" % (
        g, "on" if best["graphs"] else "off", 100 * best["mfu"], 100 * GOAL_MFU)]
    for name, r, goal in (("torch.compile", tc, GOAL_VS_COMPILE),
                          ("llm.c cuDNN", ll, GOAL_VS_LLMC)):
        if r:
            parts.append("%s %.0f: gptx %.2fx (goal %.1fx)" % (name, r["tokens_per_s"],
                                                             g / r["tokens_per_s"], goal))
        else:
            parts.append("%s not measured" % name)
    for name, key in (("eager", "torch_eager_b64"), ("llm.c own attention", "llmc_own")):
        if key in runs:
            parts.append("%s %.0f: gptx %.2fx" % (name, runs[key]["tokens_per_s"],
                                                  g / runs[key]["tokens_per_s"]))
    return rep, "; ".join(parts)


# ---- Nsight Compute's text report ---------------------------------------------------------
HEAD = re.compile(r"^\s{1,4}(\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), "
                  r"(?:Context|Device) ")
METRIC = re.compile(r"^\s+(Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|"
                    r"Registers Per Thread|Achieved Occupancy|Theoretical Occupancy)\s+(\S+)\s+"
                    r"([\d,.]+)\s*$")
TIME_UNIT = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3,
             "msecond": 1e-3, "s": 1.0, "second": 1.0}


def short(name):
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, 1)[0].strip()


def ncu_kernels(text):
    kernels, cur = [], None
    for line in text.splitlines():
        m = HEAD.match(line)
        if m:
            cur = {"name": short(m.group(1)), "grid": "x".join(m.group(2, 3, 4)),
                   "block": "x".join(m.group(5, 6, 7))}
            kernels.append(cur)
            continue
        m = METRIC.match(line)
        if cur is not None and m:
            key, unit, val = m.group(1), m.group(2), float(m.group(3).replace(",", ""))
            if key == "Duration":
                val *= TIME_UNIT.get(unit, float("nan")) * 1e6  # us
            cur[key] = val
    return kernels


def ncu_table(text):
    ks = ncu_kernels(text)
    if not ks:
        return ["no kernel found in the Nsight Compute report"]
    cols = ("Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput",
            "Registers Per Thread", "Achieved Occupancy")
    out = ["%-28s %-13s %-11s %10s %6s %6s %6s %5s %6s" % (
        "kernel", "grid", "block", "us", "DRAM%", "mem%", "SM%", "regs", "occ%")]
    for k in ks:
        v = ["%.1f" % k[c] if c in k else "-" for c in cols]
        out.append("%-28s %-13s %-11s %10s %6s %6s %6s %5s %6s" % (
            k["name"][:28], k["grid"], k["block"], v[0], v[1], v[2], v[3], v[4].split(".")[0], v[5]))
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("figure", "peers", "ncu"):
        sys.exit(__doc__)
    what, path = sys.argv[1], sys.argv[2]
    if what == "figure":
        r = load(path)
        if r:
            print(figure(r))
    elif what == "peers":
        rep, side = peers(path)
        print("bitwise repeatable: " + rep)
        print("B 64 bf16, tokens/s, same call: " + side)
    else:
        with open(path, errors="replace") as f:
            print("\n".join(ncu_table(f.read())))


if __name__ == "__main__":
    main()
