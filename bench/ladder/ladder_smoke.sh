#!/usr/bin/env bash
# Smoke test of gptx-bench (ctest bench_ladder_smoke): the micro preset in
# both modes must pass and write its CSV/JSON/SVG; with every tolerance
# scaled to 0 it must report FAIL and exit 1.
#   ladder_smoke.sh GPTX_BENCH OUT_DIR
set -u
bench="$1"
out="$2"
rm -rf "$out"
mkdir -p "$out"
fail=0
err() { echo "ladder_smoke: $*" >&2; fail=1; }

for mode in cumulative isolated; do
  prefix="$out/micro-$mode"
  "$bench" --config micro --mode "$mode" --steps 3 --warmup 1 --repeats 1 --threads 2 \
    --out-prefix "$prefix" > "$prefix.md"
  rc=$?
  [[ $rc -eq 0 ]] || err "$mode: exit status $rc, expected 0"
  for ext in csv json svg tokens.bin; do
    [[ -s "$prefix.$ext" ]] || err "$mode: $prefix.$ext missing or empty"
  done
  # 1 baseline + 7 changes (+ 1 reference row of every fp32 kernel change in
  # the isolated mode) + 2 precision policies + 4 CUDA rows, each a CSV line
  # after the header; the policies are n/a in builds without oneDNN
  rows=14
  [[ $mode == isolated ]] && rows=15
  no_dnnl=$(grep -c '"n/a (this build has no oneDNN' "$prefix.csv")
  lines=$(wc -l < "$prefix.csv")
  [[ $lines -eq $((rows + 1)) ]] || err "$mode: $prefix.csv has $lines lines, expected $((rows + 1))"
  pass=$((rows - 4 - no_dnnl))
  [[ $(grep -c '"PASS' "$prefix.csv") -eq $pass ]] || err "$mode: expected $pass PASS rows in the CSV"
  [[ $(grep -c '"n/a (' "$prefix.csv") -eq $((4 + no_dnnl)) ]] || err "$mode: expected 4 CUDA n/a rows"
  grep -q '"all_pass": true' "$prefix.json" || err "$mode: JSON lacks \"all_pass\": true"
  grep -q '</svg>' "$prefix.svg" || err "$mode: SVG not closed"
  [[ $(grep -c '<rect x=' "$prefix.svg") -eq $pass ]] || err "$mode: expected $pass bars in the SVG"
  grep -q 'do not multiply' "$prefix.md" || err "$mode: the Markdown lacks the note on speed-ups"
  grep -q 'timing scope: training steps only' "$prefix.md" || err "$mode: no timing scope"
done

# the FAIL path: exact equality demanded, flash attention reorders sums
prefix="$out/micro-exact"
"$bench" --config micro --mode isolated --steps 1 --warmup 0 --repeats 1 --threads 2 \
  --tolerance-scale 0 --out-prefix "$prefix" > "$prefix.md"
rc=$?
[[ $rc -eq 1 ]] || err "tolerance 0: exit status $rc, expected 1"
grep -q '| FAIL |' "$prefix.md" || err "tolerance 0: no FAIL row in the table"
grep -q '"all_pass": false' "$prefix.json" || err "tolerance 0: JSON lacks \"all_pass\": false"

if [[ $fail -ne 0 ]]; then
  echo "ladder_smoke: FAILED (outputs in $out)" >&2
  exit 1
fi
echo "ladder_smoke: all checks passed"
