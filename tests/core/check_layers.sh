#!/usr/bin/env bash
# The layering docs/architecture.md draws, checked on the sources:
#  1. lib/core's headers include only lib/core and the public headers (no
#     reaching up into lib/comm, lib/sample, lib/model ...);
#  2. the CPU backend has no circle: its runtime (cpu_runtime, cpu_threadpool,
#     cpu_blas_buffers, cpu_bf16) includes neither the kernels' header nor
#     oneDNN's, and only the table (cpu_table.c) names the ops table or the
#     table's header-level entry point.
# Usage: check_layers.sh SOURCE_ROOT. Prints every violation; exit 1 if any.
set -uo pipefail
root="${1:?usage: check_layers.sh SOURCE_ROOT}"
cd "$root" || exit 2
bad=0
fail() { echo "check_layers: $*"; bad=1; }

for h in lib/core/*.h; do
  while IFS= read -r inc; do
    [[ -f "lib/core/$inc" || -f "include/$inc" ]] ||
      fail "$h includes \"$inc\", which is not in lib/core or include/"
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$h")
done

runtime=(backends/cpu/cpu_runtime.h backends/cpu/cpu_runtime.c backends/cpu/cpu_threadpool.h
         backends/cpu/cpu_threadpool.c backends/cpu/cpu_blas_buffers.c backends/cpu/cpu_bf16.h
         backends/cpu/cpu_bf16.c)
for f in "${runtime[@]}"; do
  [[ -f "$f" ]] || { fail "$f is missing (update this check with the tree)"; continue; }
  grep -nE '#[[:space:]]*include[[:space:]]*"(\.\./)?(cpu_kernels|cpu_dnnl)\.h"' "$f" |
    while IFS= read -r line; do echo "check_layers: runtime file $f calls up: $line"; done
  grep -qE '#[[:space:]]*include[[:space:]]*"(\.\./)?(cpu_kernels|cpu_dnnl)\.h"' "$f" && bad=1
done
while IFS= read -r f; do
  [[ "$f" == backends/cpu/cpu_table.c ]] && continue
  if grep -q "gptx_cpu_backend_ops" "$f"; then
    fail "$f reaches the ops table (only cpu_table.c may): $(grep -n gptx_cpu_backend_ops "$f" | head -1)"
  fi
done < <(find backends/cpu -name '*.[ch]' | sort)
# the table's functions stay its own: everything in cpu_table.c is static
# but the one entry point lib/ calls
grep -nE '^(int|void|const|size_t|unsigned|float|double)[^;]*\(' backends/cpu/cpu_table.c |
  grep -v 'gptx_cpu_backend_ops' | while IFS= read -r line; do
    echo "check_layers: cpu_table.c exports a function others could call back into: $line"
  done
grep -nE '^(int|void|const|size_t|unsigned|float|double)[^;]*\(' backends/cpu/cpu_table.c |
  grep -qv 'gptx_cpu_backend_ops' && bad=1
[[ $bad == 0 ]] && echo "check_layers: lib/core's headers and backends/cpu's layers are in order"
exit $bad
