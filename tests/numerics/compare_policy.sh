#!/bin/sh
# compare_policy.sh GPTX_COMPARE POLICY ARGS...: CPU fp32 against CPU POLICY
# under the bf16 tolerance preset must pass (exit 0), and the report must say
# that side b ran POLICY with oneDNN's products and differed from fp32: a side
# whose policy were dropped would pass any tolerance bit for bit.
exe=$1
p=$2
shift 2
out=$("$exe" --a cpu:2:fp32 --b "cpu:2:$p" --tolerance bf16 "$@")
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "compare_policy: exit status $rc, expected 0" >&2
  exit 1
fi
for want in "dtype $p," "products oneDNN" "logits bitwise equal: no"; do
  if ! printf '%s\n' "$out" | grep -qF "$want"; then
    echo "compare_policy: the report lacks \"$want\"" >&2
    exit 1
  fi
done
