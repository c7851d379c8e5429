#!/usr/bin/env python3
"""Instruction mix of each kernel's main loop, from SASS (cuobjdump -sass).

    sass_loop_counts.py FILE.sass [NAME-SUBSTRING]

For every function whose name holds NAME-SUBSTRING (default: flash), finds
the widest backward branch (the tile loop) and counts the instructions
between its target and the branch, once each (inner loops are not
multiplied), by class: tensor-core MMA, LDSM (ldmatrix), MUFU (ex2, rcp),
FP32 ALU, integer/address ALU, shared/global memory, cp.async (LDGSTS),
shuffles, barriers, other. These static counts are one iteration of the
tile loop: docs/cuda.md's performance model turns them into issue slots.
cuobjdump is not in the CUDA toolkit installed here; Triton's wheel carries
one (pip download triton --no-deps; triton/backends/nvidia/bin/cuobjdump).
"""
import re
import subprocess
import sys
from collections import Counter

CLASSES = [
    ("mma", re.compile(r"^HMMA")),
    ("ldmatrix", re.compile(r"^LDSM")),
    ("cp.async", re.compile(r"^LDGSTS|^LDGDEPBAR|^DEPBAR")),
    ("mufu", re.compile(r"^MUFU")),
    ("fp32", re.compile(r"^(FFMA|FMUL|FADD|FMNMX|FSEL|FSETP|FCHK|F2F|F2I|I2F|F2FP)")),
    ("shared", re.compile(r"^(LDS|STS)")),
    ("global", re.compile(r"^(LDG|STG|LD|ST|LDC|ULDC)")),
    ("shfl", re.compile(r"^SHFL")),
    ("barrier", re.compile(r"^(BAR|WARPSYNC|BSSY|BSYNC)")),
    ("int", re.compile(r"^(IADD|IMAD|LOP|SHF|LEA|ISETP|SEL|PRMT|MOV|IABS|VIADD|UIADD|UIMAD|ULOP|USHF|ULEA|UISETP|UMOV|USEL|S2R|S2UR|R2UR|CS2R|PLOP|P2R|R2P|VIMNMX|IMNMX|UPRMT|BMSK|POPC|FLO|BREV)")),
]

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")


def functions(text):
    name, body = None, []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = LINE.search(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(3), m.group(4)))
    if name:
        yield name, body


def main_loop(body):
    best = None
    for addr, op, args in body:
        if op.startswith("BRA"):
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) < addr:
                lo = int(t.group(1), 16)
                if best is None or addr - lo > best[1] - best[0]:
                    best = (lo, addr)
    return best


def pretty(name):
    """The demangled name without its parameter list (c++filt when present):
    k_flash_forward<bf16, 64, 4, 1, 0>."""
    try:
        out = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
    except OSError:
        return name
    out = re.sub(r"\(.*\)$", "", out or name)
    return out.replace("__nv_bfloat16", "bf16").replace("void ", "")


def classify(op):
    for cls, pat in CLASSES:
        if pat.match(op):
            return cls
    return "other"


def main():
    text = open(sys.argv[1]).read()
    want = sys.argv[2] if len(sys.argv) > 2 else "flash"
    order = [c for c, _ in CLASSES] + ["other"]
    print("%-48s %6s " % ("kernel (main loop, static count)", "total") +
          " ".join("%8s" % c for c in order))
    for name, body in functions(text):
        if want not in name:
            continue
        loop = main_loop(body)
        if not loop:
            continue
        c = Counter(classify(op) for addr, op, _ in body if loop[0] <= addr <= loop[1])
        print("%-48s %6d " % (pretty(name)[:48], sum(c.values())) +
              " ".join("%8d" % c[k] for k in order))


if __name__ == "__main__":
    main()
