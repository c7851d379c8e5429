#!/usr/bin/env bash
# Smoke test of gptx-op-profile (ctest bench_op_profile_smoke):
#   - the tiny preset on the CPU exits 0 and prints the header, the per-op
#     lines of a step's ops and every group line;
#   - --batch replaces the preset's batch, and the header says so;
#   - --backend cuda exits 77 with its reason where no device (or no cuda
#     module) is reachable, or 0 with a device-event profile where one is;
#   - a bad flag exits 2.
#   op_profile_smoke.sh GPTX_OP_PROFILE
set -u
prog="$1"
fail=0
err() { echo "op_profile_smoke: $*" >&2; fail=1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$prog" --backend cpu --config tiny --threads 1 --warmup 1 --steps 2 > "$out" 2>&1
rc=$?
cat "$out"
[[ $rc -eq 0 ]] || err "cpu: exit status $rc, expected 0"
for line in "tiny (4 layers" "op times: host clock" "matmul_forward lm_head 128x50304" \
            "qkv_backward attn.c_attn 128x384" "attention_backward" "crossentropy_fused" \
            "adamw" "products (bias" "attention forward" "attention backward" "LayerNorm" \
            "cross-entropy and loss sum" "gradient norm and AdamW" "embedding " \
            "elementwise" "copies and fills" "sum of the ops" "outside the ops"; do
  grep -qF -- "$line" "$out" || err "cpu: no line with '$line'"
done

# --batch 2 (the preset's is 8): the steps and the header take it
"$prog" --backend cpu --config tiny --threads 1 --warmup 0 --steps 1 --batch 2 > "$out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || err "--batch 2: exit status $rc, expected 0"
grep -qF "B 2 (--batch) x T 64" "$out" || err "--batch 2: header without 'B 2 (--batch) x T 64': $(head -n 1 "$out")"

"$prog" --backend cuda --config micro --warmup 0 --steps 1 > "$out" 2>&1
rc=$?
cat "$out"
if [[ $rc -eq 77 ]]; then
  grep -q "no CUDA backend here" "$out" || err "cuda: exit 77 without its reason"
elif [[ $rc -eq 0 ]]; then
  grep -q "op times: device time between events" "$out" || err "cuda: not the event clock"
else
  err "cuda: exit status $rc, expected 77 (no device) or 0"
fi

"$prog" --backend tpu > "$out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || err "--backend tpu: exit status $rc, expected 2"
exit $fail
