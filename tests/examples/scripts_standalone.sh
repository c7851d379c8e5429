#!/usr/bin/env bash
# The scripts a user runs from a clone (scripts/) need nothing outside it:
# no path into a neighbouring checkout (../shared, /work/...), each shell
# script parses (bash -n), and check_hf_export.sh makes its own venv when
# no PYTHON is given (issue 35, item 5: it called ../shared/tools/...).
set -euo pipefail
root=$1
status=0
for f in "$root"/scripts/*; do
  [ -f "$f" ] || continue
  if grep -nE '\.\./shared|/work/' "$f"; then
    echo "FAIL: $f refers to a path outside the clone (above)"
    status=1
  fi
  case "$f" in *.sh) bash -n "$f" || { echo "FAIL: $f does not parse"; status=1; } ;; esac
done
s=$root/scripts/check_hf_export.sh
grep -q 'python3 -m venv "\$venv"' "$s" || { echo "FAIL: $s makes no venv of its own"; status=1; }
grep -q 'pip" install .*transformers' "$s" || { echo "FAIL: $s installs no transformers"; status=1; }
[ "$status" = 0 ] && echo "ok: scripts/ is self-contained"
exit $status
