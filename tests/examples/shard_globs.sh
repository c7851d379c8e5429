#!/usr/bin/env bash
# --train-shards / --val-shards (gptx-train) and --tokens (gptx-eval) take
# the input-list syntax (examples/common/prog_inputs.h): a glob gives the
# same data as the list of its matches in any order (sorted), and a pattern
# that matches nothing is a clear error (exit 1). A shard run has the unigram
# baseline a text run has (issue 35): computed here again from the shards.
# usage: shard_globs.sh BIN_DIR DATA_DIR WORK_DIR
set -euo pipefail
bin=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$bin/gptx-tokenize" --input "$data/tinyshakespeare.txt" --out-dir s --prefix ts --shard-tokens 60000 --threads 2 > /dev/null
[ "$(ls s/ts_train_*.bin | wc -l)" -ge 3 ] || fail "want at least 3 train shards: $(ls s)"
rev=$(ls s/ts_train_*.bin | sort -r | paste -sd, -)
train() { # out-dir train-shards: the run's final line
  "$bin/gptx-train" --preset micro --threads 2 --steps 3 --eval-every 3 --sample-tokens 0 --seed 7 \
    --train-shards "$2" --val-shards 's/ts_val_*' --out-dir "$1" | tee "$1.log" | grep '^final:'
}
a=$(train glob 's/ts_train_*.bin') || fail "gptx-train with a glob failed"
b=$(train list "$rev") || fail "gptx-train with a reversed list failed"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "a glob and the reversed list of its matches train differently: '$a' vs '$b'"
# the unigram baseline: counts over the train shards, the cross-entropy of
# every val token after each shard's first, add-one smoothed over 50257 ids
grep -q 'unigram baseline on the validation shards: loss' glob.log || fail "no unigram line"
got=$(grep -o '"unigram_val_loss": [0-9.]*' glob/metrics.jsonl | head -1 | awk '{ print $2 }')
want=$(perl -e '
  sub ids { local $/; open my $f, "<:raw", $_[0] or die; my $d = <$f>; unpack("v*", substr($d, 1024)) }
  my (%c, $n); for my $p (glob "s/ts_train_*.bin") { for (ids($p)) { $c{$_}++; $n++ } }
  my ($nll, $t) = (0, 0);
  for my $p (glob "s/ts_val_*.bin") { my @v = ids($p); for my $i (1 .. $#v) { $nll -= log((($c{$v[$i]} // 0) + 1) / ($n + 50257)); $t++ } }
  printf "%.6f\n", $nll / $t')
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; if (g == "" || d > 1e-4 || d < -1e-4) exit 1 }' ||
  fail "unigram_val_loss of the shard run is '$got', recomputed $want"
evalx() { "$bin/gptx-eval" --model glob/model.safetensors --tokens "$1" --threads 2 --max-tokens 3000 | grep '^loss'; }
c=$(evalx 's/ts_train_*') d=$(evalx "$rev")
[ -n "$c" ] && [ "$c" = "$d" ] || fail "gptx-eval: a glob and the reversed list score differently: '$c' vs '$d'"
rc=0; "$bin/gptx-train" --preset micro --steps 1 --train-shards 's/nosuch_*.bin' --out-dir x > out.txt 2> err.txt || rc=$?
[ $rc -eq 1 ] && grep -q 'no file matches the pattern' err.txt || fail "gptx-train, a glob matching nothing: exit $rc: $(cat err.txt)"
rc=0; "$bin/gptx-eval" --model glob/model.safetensors --tokens 's/nosuch_*' > out.txt 2> err.txt || rc=$?
[ $rc -eq 1 ] && grep -q 'no file matches the pattern' err.txt || fail "gptx-eval, a glob matching nothing: exit $rc: $(cat err.txt)"
echo "ok: globs = sorted lists in gptx-train ($a) and gptx-eval ($c); unigram baseline $got (recomputed $want)"
