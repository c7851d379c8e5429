#!/usr/bin/env bash
# What nvcc makes of the attention kernels for sm_90, without a GPU:
#   check_flash_ptx.sh NVCC OUTDIR SOURCE [nvcc flags: -I..., -D...]
# compiles SOURCE (tests/gpu/check_flash_all.cu: the four units of the
# tensor-core kernels, or backends/cuda/cuda_attention.cu for the report alone) to PTX, assembles that with ptxas -v, and prints per kernel
# whose name holds "flash" or "attention": registers, spill stores/loads and
# the number of tensor-core instructions in its PTX (mma.sync.aligned
# m16n8k16 bf16, or m16n8k8 tf32 for the kernels of the tf32 policy).
# Fails when a tensor-core kernel (name holds "flash") spills or has no
# such instruction. Run by ctest (label unit) wherever the toolkit is.
set -euo pipefail
nvcc=$1 out=$2 src=$3
shift 3
mkdir -p "$out"
base=$(basename "$src" .cu)
ptx=$out/$base.sm_90.ptx
"$nvcc" -std=c++17 -O3 -arch=sm_90 -ptx "$@" -o "$ptx" "$src"
ptxas_bin=$(dirname "$(command -v "$nvcc")")/ptxas
"$ptxas_bin" -arch=sm_90 -v -o "$out/$base.sm_90.cubin" "$ptx" > "$out/$base.ptxas.txt" 2>&1

# mma count per entry, from the PTX text
awk '/^(\.visible )?\.entry / { name = $NF; sub(/\(.*/, "", name); seen[name] = 1 }
     /mma\.sync\.aligned\.(m16n8k16\.row\.col\.f32\.bf16\.bf16|m16n8k8\.row\.col\.f32\.tf32\.tf32)\.f32/ {
         if (name != "") n[name]++ }
     END { for (k in seen) print k, (k in n ? n[k] : 0) }' "$ptx" | sort > "$out/$base.mma.txt"

# registers and spills per entry, from ptxas -v
awk '/Compiling entry function/ { name = $0; sub(/.*function \x27/, "", name); sub(/\x27.*/, "", name) }
     /spill stores/ { st = $5; ld = $9 }
     /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1); print name, r, st, ld }' \
    "$out/$base.ptxas.txt" | sort > "$out/$base.regs.txt"

status=0
printf '%-64s %5s %6s %6s %5s\n' "kernel ($base.cu, sm_90)" regs spillS spillL mma
while read -r name regs st ld; do
    case "$name" in *flash* | *attention*) ;; *) continue ;; esac
    mma=$(awk -v k="$name" '$1 == k { print $2 }' "$out/$base.mma.txt")
    pretty=$(echo "$name" | c++filt 2>/dev/null || echo "$name")
    flag=""
    case "$name" in *flash*)
        if [ "$st" != 0 ] || [ "$ld" != 0 ]; then flag=" SPILLS"; status=1; fi
        if [ "${mma:-0}" = 0 ]; then flag="$flag NO-MMA"; status=1; fi ;;
    esac
    printf '%-64s %5s %6s %6s %5s%s\n' "$pretty" "$regs" "$st" "$ld" "${mma:-0}" "$flag"
done < "$out/$base.regs.txt"
[ -s "$out/$base.regs.txt" ] || { echo "no kernels found in the ptxas report"; status=1; }
exit $status
