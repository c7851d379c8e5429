#!/usr/bin/env bash
# gptx-bench-peak in 0.05 s per figure: exit 0, the fp32 ISA the CPU has
# (/proc/cpuinfo's flags, independent of the program's own detection), bf16
# null exactly where the CPU has no avx512_bf16, every figure between a floor
# and a ceiling that the vector width and any real clock allow; then
# gptx-bench-train --peak reads the file and reports % of it.
#   peak_smoke.sh GPTX_BENCH_PEAK GPTX_BENCH_TRAIN WORKDIR
# No timing claim: the bounds are 6x apart on either side of a real figure.
set -euo pipefail
peak=$1 train=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
field() { sed -n "s/.*\"$2\": *\([^,}]*\).*/\1/p" "$1" | head -1 | tr -d '"'; }
# awk's arithmetic on the figures (numbers and products of numbers): cmp A OP B
cmp() { awk "BEGIN { exit !(($1) $2 ($3)) }"; }

"$peak" --seconds 0.05 --json "$work/peak.json" > "$work/peak.out" 2>&1 ||
  { cat "$work/peak.out"; fail "gptx-bench-peak exited $?"; }
cat "$work/peak.out" "$work/peak.json"
j="$work/peak.json"
isa=$(field "$j" fp32_isa) threads=$(field "$j" threads)
f_all=$(field "$j" fp32_peak_gflops) f_one=$(field "$j" fp32_peak_1t_gflops)
b_all=$(field "$j" bf16_peak_gflops) b_one=$(field "$j" bf16_peak_1t_gflops)
[ "$threads" -ge 1 ] || fail "threads '$threads'"

# the ISA the CPU has, by the kernel's flags
flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1) "
if [ "$flags" = "  " ]; then
  echo "no x86 flags in /proc/cpuinfo: ISA checks skipped"
  want=$isa lanes=$(field "$j" fp32_lanes)
elif [[ "$flags" == *" avx512f "* ]]; then want=avx512f lanes=16
elif [[ "$flags" == *" avx2 "* && "$flags" == *" fma "* ]]; then want=avx2 lanes=8
else want=sse lanes=4
fi
[ "$isa" = "$want" ] || fail "fp32_isa is '$isa', the CPU's widest is '$want'"

# Bounds per thread: at most 2 FMA ports x 2 flops x lanes at 6 GHz; at
# least one FMA every other cycle at 1 GHz (lanes GFLOP/s), a figure a
# loaded 2-core machine still reaches. Counting 4 flops per FMA, dropping the
# lane count or a loop the compiler removed falls outside.
for v in "$f_one:1" "$f_all:$threads"; do
  x=${v%:*} n=${v#*:}
  cmp "$x" ">=" "$n * $lanes * 1" || fail "fp32 $x GFLOP/s on $n threads: below $lanes GFLOP/s per thread"
  cmp "$x" "<=" "$n * $lanes * 24" || fail "fp32 $x GFLOP/s on $n threads: above $((lanes * 24)) GFLOP/s per thread (2 ports x 2 flops x $lanes lanes x 6 GHz)"
done
if [[ "$flags" == *" avx512_bf16 "* ]]; then
  for v in "$b_one:1" "$b_all:$threads"; do
    x=${v%:*} n=${v#*:}
    [ "$x" != null ] || fail "the CPU has avx512_bf16 and bf16_peak is null"
    cmp "$x" ">=" "$n * 16" || fail "bf16 $x GFLOP/s on $n threads: below 16 per thread"
    cmp "$x" "<=" "$n * 16 * 48" || fail "bf16 $x GFLOP/s on $n threads: above 768 per thread"
  done
else
  [ "$b_all" = null ] && [ "$b_one" = null ] ||
    fail "no avx512_bf16 on this CPU, but bf16_peak_gflops is '$b_all' (1 thread '$b_one')"
  grep -q '^bf16: not present' "$work/peak.out" || fail "no 'bf16: not present' line"
fi

# --isa: sse is on every x86-64; one the CPU lacks exits 1; bad flags exit 2
if [ "$flags" != "  " ]; then
  "$peak" --seconds 0.03 --threads 1 --isa sse --json "$work/sse.json" > /dev/null
  [ "$(field "$work/sse.json" fp32_isa)" = sse ] || fail "--isa sse ran $(field "$work/sse.json" fp32_isa)"
  if [[ "$flags" != *" avx512f "* ]]; then
    rc=0; "$peak" --seconds 0.03 --isa avx512f > /dev/null 2> "$work/err" || rc=$?
    [ $rc = 1 ] && grep -q 'does not have it' "$work/err" || fail "--isa avx512f without it: exit $rc"
  fi
fi
rc=0; "$peak" --seconds 0 > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "--seconds 0 exited $rc, expected 2"

# gptx-bench-train --peak: one thread takes the file's one-thread fp32 figure
"$train" --config micro --threads 1 --warmup 1 --steps 1 --peak "$j" --json "$work/train.json" \
  > "$work/train.out"
t="$work/train.json"
grep -q '^of peak     : ' "$work/train.out" || fail "gptx-bench-train printed no 'of peak' line"
for k in tokens_per_s gflops step_median_s; do
  [ -n "$(field "$t" $k)" ] || fail "gptx-bench-train's JSON lost $k"
done
[ "$(field "$t" peak_gflops)" = "$f_one" ] || fail "peak_gflops $(field "$t" peak_gflops), want $f_one"
g=$(field "$t" gflops) p=$(field "$t" pct_of_peak)
cmp "$p" ">" 0 && awk -v g="$g" -v f="$f_one" -v p="$p" 'BEGIN { d = 100 * g / f - p; exit !(d < 0.01 && d > -0.01) }' ||
  fail "pct_of_peak $p is not 100 * $g / $f_one"
rc=0; "$train" --config micro --peak "$j" --peak-gflops 5 > /dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "--peak with --peak-gflops exited $rc, expected 2"
echo "bench_peak_smoke: OK ($isa, $threads threads)"
