#!/usr/bin/env bash
# gptx-train's live progress line on a terminal (a pseudo-terminal from
# script(1)) fits the width it is given (a longer line wraps, and every
# redraw then leaves a line behind), in one of its forms, never cut short;
# and loss.svg's axes carry round ticks.
set -euo pipefail
train=$1 work=$2
command -v script > /dev/null || { echo "script(1) not found: skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
for cols in 80 60 40; do
  COLUMNS=$cols script -qec "$train --steps 12 --eval-every 0 --sample-tokens 0 --threads 2 --out-dir run --overwrite" \
    /dev/null > "pty$cols.out"
  tr '\r' '\n' < "pty$cols.out" | sed 's/\x1b\[K//g' | grep -a -E '^(step )?[0-9]+/12' > "lines$cols.txt"
  [ "$(wc -l < "lines$cols.txt")" -ge 12 ] || { echo "no progress lines at $cols columns"; cat "pty$cols.out"; exit 1; }
  longest=$(awk '{ if (length($0) > m) m = length($0) } END { print m }' "lines$cols.txt")
  if [ "$longest" -ge "$cols" ]; then
    echo "a progress line of $longest characters on a $cols-column terminal:"; sort -u "lines$cols.txt" | head -3; exit 1
  fi
  # whole, not cut at the edge: every form ends with the ETA
  if grep -a -v -E '([0-9]+m[0-9]{2}s|[0-9]+h[0-9]{2}m|--)$' "lines$cols.txt" | head -1 | grep -q .; then
    echo "a progress line cut short at $cols columns:"; grep -a -v -E '([0-9]+m[0-9]{2}s|[0-9]+h[0-9]{2}m|--)$' "lines$cols.txt" | head -2
    exit 1
  fi
  echo "ok: $cols columns, longest progress line $longest: $(tail -n 1 "lines$cols.txt")"
done

# loss.svg: the axes' ticks on round values, 1, 2 or 5 x 10^k apart
# (tokens as 5k, 1.2M)
svg=run/loss.svg
[ -s "$svg" ] || { echo "no $svg"; exit 1; }
check_ticks() { # <what> <labels, one per line>
  awk -v what="$1" '
    function val(s) { m = 1; if (s ~ /k$/) m = 1e3; if (s ~ /M$/) m = 1e6; if (s ~ /G$/) m = 1e9
                      sub(/[kMG]$/, "", s); return s * m }
    { v[NR] = val($0) }
    END {
      if (NR < 2) { print what ": fewer than 2 ticks"; exit 1 }
      d = v[2] - v[1]; e = log(d) / log(10); k = int(e + 100) - 100; n = d / (10 ^ k)
      if (!(n > 0.999 && n < 1.001 || n > 1.999 && n < 2.001 || n > 4.999 && n < 5.001)) {
        print what ": ticks " d " apart, not 1, 2 or 5 x 10^k"; exit 1 }
      for (i = 2; i <= NR; i++) {
        dd = v[i] - v[i - 1]; if (dd - d > 1e-6 * d || d - dd > 1e-6 * d) { print what ": uneven ticks"; exit 1 }
        r = v[i] / d; if (r - int(r + 0.5) > 1e-6 || int(r + 0.5) - r > 1e-6) { print what ": tick " v[i] " not a multiple of " d; exit 1 } }
      printf "ok: %s ticks every %g (%d of them)\n", what, d, NR
    }'
}
grep -o 'text-anchor="middle">[0-9.]*</text>' "$svg" | sed 's/.*">//; s/<.*//' | check_ticks "optimizer-step axis"
grep -o 'text-anchor="end">[0-9.]*</text>' "$svg" | sed 's/.*">//; s/<.*//' | check_ticks "loss axis"
grep -o 'fill="#555">[0-9.]*[kMG]*</text>' "$svg" | sed 's/.*">//; s/<.*//' | check_ticks "tokens axis"
