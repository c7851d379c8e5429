#!/usr/bin/env bash
# Generation benchmark: gptx-bench-generate (prefill, cached decode, the
# uncached path, the memory-bandwidth bound) and bench/torch_bench_generate.py
# (PyTorch with a key/value cache) on the same GPT-2 124M weights, batch 1,
# prompts of 64 and 512 tokens + 256 new, fp32 and bf16, one thread count for
# all. Prints every run and a Markdown summary. About 6 minutes on 2 cores.
# See docs/benchmarks.md.
#
#   PYTHON=/tmp/torch2/bin/python bench/run_generate_bench.sh
#
# Environment: BUILD_DIR (default <repo>/build-bench, must contain
# bench/gptx-bench-generate), THREADS (2), PYTHON (default /usr/bin/python3;
# PyTorch 2.x for SDPA), OUT_DIR (a temp dir by default), UNCACHED (tokens
# measured without the cache, default 8), NEW (256), PROMPTS ("64 512"),
# PRECISIONS ("fp32 bf16"), SKIP_TORCH=1, TORCH_COMPILE=1 adds torch.compile.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh" gptx-generate-bench
UNCACHED="${UNCACHED:-8}" NEW="${NEW:-256}"
PROMPTS="${PROMPTS:-64 512}" PRECISIONS="${PRECISIONS:-fp32 bf16}"
bench="$BUILD_DIR/bench/gptx-bench-generate"
[[ -x "$bench" ]] || { echo "run_generate_bench.sh: $bench not found; build $BUILD_DIR first" >&2; exit 1; }

model="$(lscpu | sed -n 's/^Model name: *//p')"
echo "== machine: $model, $(nproc) online CPUs; flags: $(lscpu | grep -o -w -E 'avx512f|avx512_bf16|amx_bf16' | tr '\n' ' ')"
echo "== threads: $THREADS; results in $OUT_DIR"
printf '{"model": "%s", "nproc": %d}\n' "$model" "$(nproc)" > "$OUT_DIR/machine.json"

weights="$OUT_DIR/gpt2-124M-random.safetensors"
"$bench" --threads "$THREADS" --prompt 4 --new 2 --save-model "$weights" > /dev/null
for p in $PRECISIONS; do
  for n in $PROMPTS; do
    echo "== gptx $p prompt $n"
    "$bench" --model "$weights" --threads "$THREADS" --precision "$p" --prompt "$n" --new "$NEW" \
      --uncached-tokens "$UNCACHED" --json "$OUT_DIR/gptx-$p-$n.json"
    if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
      flag=(); [[ "$p" == fp32 ]] || flag=(--bf16)
      echo "== torch $p prompt $n"
      "$PYTHON" "$here/torch_bench_generate.py" --model "$weights" --threads "$THREADS" \
        --prompt "$n" --new "$NEW" "${flag[@]}" --json "$OUT_DIR/torch-$p-$n.json"
      if [[ "${TORCH_COMPILE:-0}" == 1 ]]; then
        echo "== torch $p+compile prompt $n"
        "$PYTHON" "$here/torch_bench_generate.py" --model "$weights" --threads "$THREADS" \
          --prompt "$n" --new "$NEW" "${flag[@]}" --compile \
          --json "$OUT_DIR/torch-$p+compile-$n.json"
      fi
    fi
  done
done

"$PYTHON" - "$OUT_DIR" "$PRECISIONS" "$PROMPTS" <<'EOF'
import json, os, sys
d, precisions, prompts = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(name):
    p = os.path.join(d, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
m = load("machine")
print(f"\n## Generation summary ({m['model']}, batch 1, greedy)\n")
print("| policy | prompt | gptx prefill tok/s | gptx decode tok/s | no cache tok/s | cache / no cache "
      "| bound tok/s (2 GiB read) | bound / decode time | torch prefill | torch decode | gptx / torch decode |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for p in precisions:
    for n in prompts:
        g = load(f"gptx-{p}-{n}")
        if not g:
            continue
        t = load(f"torch-{p}-{n}")
        tc = load(f"torch-{p}+compile-{n}")
        best = max([x for x in (t, tc) if x], key=lambda x: x["decode_tokens_per_s"], default=None)
        unc = g["uncached_tokens_per_s"]
        print(f"| {p} | {n} | {g['prefill_tokens_per_s']:.0f} | {g['decode_tokens_per_s']:.1f} "
              f"| {unc:.2f} | {g['decode_tokens_per_s'] / unc:.1f}x | {g['bound_tokens_per_s']:.1f} "
              f"| {g['bound_tokens_per_s'] / g['decode_tokens_per_s']:.2f}x "
              f"| {best['prefill_tokens_per_s']:.0f} | {best['decode_tokens_per_s']:.1f} ({best['variant']}) "
              f"| {g['decode_tokens_per_s'] / best['decode_tokens_per_s']:.2f}x |" if best else
              f"| {p} | {n} | {g['prefill_tokens_per_s']:.0f} | {g['decode_tokens_per_s']:.1f} | {unc:.2f} "
              f"| {g['decode_tokens_per_s'] / unc:.1f}x | {g['bound_tokens_per_s']:.1f} "
              f"| {g['bound_tokens_per_s'] / g['decode_tokens_per_s']:.2f}x | - | - | - |")
print()
for p in precisions:
    g = load(f"gptx-{p}-{prompts[-1]}")
    if g:
        print(f"- {p}: {g['weight_bytes'] / 1e6:.0f} MB of weights per token; read bandwidth "
              f"{g['bandwidth_2gib_gbps']:.1f} GB/s (2 GiB), {g['bandwidth_model_gbps']:.1f} GB/s "
              f"(a buffer of the bytes one token reads)")
EOF
