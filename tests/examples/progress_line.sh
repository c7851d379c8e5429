#!/usr/bin/env bash
# gptx-train's live progress line on a terminal (a pseudo-terminal from
# script(1)) fits the width it is given (a longer line wraps, and every
# redraw then leaves a line behind), in one of its forms, never cut short.
set -euo pipefail
train=$1 work=$2
command -v script > /dev/null || { echo "script(1) not found: skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
for cols in 80 60 40; do
  COLUMNS=$cols script -qec "$train --steps 12 --eval-every 0 --sample-tokens 0 --threads 2 --out-dir run" \
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
