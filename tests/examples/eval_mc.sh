#!/usr/bin/env bash
# gptx-eval --multiple-choice on tests/examples/data/mc_small.jsonl (15
# HellaSwag-layout examples: 13 whose right ending is the-verdict.txt's own
# continuation against Middlemarch phrases of other lengths, an easy one of
# English against letter noise, one with escapes, non-ASCII and ignored keys):
#   - every ending's summed loss equals the one the perplexity path gives
#     (gptx-eval --text on context + " " + ending, minus on the context alone:
#     loss x predicted tokens), so a mask or an off-by-one shows;
#   - acc and acc_norm are the argmins of those sums and means;
#   - 4 rows (1 example) per pass and 64 rows (all) per pass, padded, give the
#     same losses;
#   - rows longer than --seq are cut from the start; an ending longer than
#     --seq, and malformed lines, are refused naming the line.
set -euo pipefail
train=$1 eval=$2 fixture=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$train" --steps 30 --eval-every 30 --sample-tokens 0 --threads 2 --out-dir run > train.log
model=run/model.safetensors
field() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1"; }

"$eval" --model "$model" --multiple-choice "$fixture" --threads 2 --details d4.jsonl \
  --json mc.json > mc.txt
cat mc.txt
"$eval" --model "$model" --multiple-choice "$fixture" --threads 2 --batch 64 \
  --details d64.jsonl --json mc64.json > /dev/null
grep -q '^acc      : ' mc.txt && grep -q '^acc_norm : ' mc.txt
[ "$(field mc.json count)" = 15 ] || { echo "count $(field mc.json count), expected 15"; exit 1; }

# acc/acc_norm from the details; the batch sizes agree; the easy one is right
perl -MJSON::PP -e '
  my ($fix, $d4, $d64, $json) = @ARGV;
  sub lines { open(my $f, "<", $_[0]) or die "$_[0]: $!"; my @r = map { decode_json($_) } grep { /\S/ } <$f>; @r }
  my @ex = lines($fix); my @a = lines($d4); my @b = lines($d64); my ($j) = lines($json);
  die "details: " . scalar(@a) . " and " . scalar(@b) . " lines, expected 15\n" unless @a == 15 && @b == 15;
  my ($c, $cn) = (0, 0);
  for my $i (0 .. $#a) {
    my ($x, $y) = ($a[$i], $b[$i]);
    die "line $x->{line}: label $x->{label}, the file says $ex[$i]{label}\n" unless $x->{label} == $ex[$i]{label};
    my ($p, $q) = (0, 0);
    for my $e (0 .. 3) {
      my ($s, $t) = ($x->{sum}[$e], $y->{sum}[$e]);
      die "line $x->{line} ending $e: sum $s with 4 rows a pass, $t with 64\n" if abs($s - $t) > 1e-4 * (1 + abs($s));
      die "line $x->{line} ending $e: mean $x->{mean}[$e] != sum / tokens\n"
        if abs($x->{mean}[$e] - $s / $x->{tokens}[$e]) > 1e-5 * (1 + abs($s));
      $p = $e if $x->{sum}[$e] < $x->{sum}[$p];
      $q = $e if $x->{mean}[$e] < $x->{mean}[$q];
    }
    die "line $x->{line}: pred $x->{pred} / $x->{pred_norm}, the argmins are $p / $q\n"
      unless $p == $x->{pred} && $q == $x->{pred_norm};
    $c += $p == $x->{label}; $cn += $q == $x->{label};
  }
  die "correct $j->{correct} / $j->{correct_norm}, the details give $c / $cn\n"
    unless $c == $j->{correct} && $cn == $j->{correct_norm};
  die "acc $j->{acc} != $c / 15\n" if abs($j->{acc} - $c / 15) > 1e-6;
  die "acc_norm $j->{acc_norm} != $cn / 15\n" if abs($j->{acc_norm} - $cn / 15) > 1e-6;
  my $easy = $a[13];
  die "the easy example: pred $easy->{pred} / $easy->{pred_norm}, label 1\n" unless $easy->{pred} == 1 && $easy->{pred_norm} == 1;
  printf "ok: acc %.4f, acc_norm %.4f are the details\x27 argmins; 4 and 64 rows a pass agree; the easy one is right\n", $j->{acc}, $j->{acc_norm};
' "$fixture" d4.jsonl d64.jsonl mc.json

# the perplexity path, one ending at a time, for examples 1-4 and the easy one:
# sum(context + " " + ending) - sum(context) = the ending's summed loss
perl -MJSON::PP -e '
  open(my $f, "<", $ARGV[0]) or die; my @ex = map { decode_json($_) } <$f>;
  for my $i (0, 1, 2, 3, 13) {
    open(my $o, ">:raw", "ctx$i.txt"); print $o $ex[$i]{ctx}; close $o;
    for my $e (0 .. 3) { open($o, ">:raw", "full$i-$e.txt"); print $o "$ex[$i]{ctx} $ex[$i]{endings}[$e]"; close $o; }
  }' "$fixture"
summed() { "$eval" --model "$model" --text "$1" --threads 2 --json s.json --overwrite > /dev/null
  awk -v l="$(field s.json loss)" -v n="$(field s.json predicted)" 'BEGIN { printf "%.6f", l * n }'; }
for i in 0 1 2 3 13; do
  base=$(summed "ctx$i.txt")
  for e in 0 1 2 3; do
    full=$(summed "full$i-$e.txt")
    got=$(perl -MJSON::PP -ne 'BEGIN { $n = 0 } $n++; if ($n == '"$((i + 1))"') { print decode_json($_)->{sum}['"$e"'] }' d4.jsonl)
    awk -v f="$full" -v b="$base" -v g="$got" -v w="line $((i + 1)) ending $e" 'BEGIN {
      want = f - b; d = want - g; if (d < 0) d = -d
      if (d > 2e-3 + 1e-4 * (want < 0 ? -want : want)) { print w ": summed loss " g ", the perplexity path gives " want; exit 1 } }'
  done
done
echo "ok: 20 endings' summed losses equal the perplexity path's (context + ending minus context)"

# rows longer than --seq keep their last T + 1 tokens; a longer ending is refused
"$eval" --model "$model" --multiple-choice "$fixture" --threads 2 --seq 16 --json cut.json > cut.txt
cut=$(field cut.json truncated_rows)
[ "$cut" -gt 0 ] || { echo "--seq 16: no row was cut"; cat cut.txt; exit 1; }
echo "ok: --seq 16 cut $cut rows"

expect_fail() { # <exit status> <what the message must contain> <command...>
  local code=$1 want=$2; shift 2
  set +e; msg=$("$@" 2>&1 >/dev/null); rc=$?; set -e
  if [ "$rc" -ne "$code" ] || [[ "$msg" != *"$want"* ]]; then
    echo "'$*': rc $rc, message '$msg' (wanted $code and '$want')"; exit 1
  fi
  echo "ok: $* -> $msg"
}
expect_fail 1 "line 9: ending 2 has 14 tokens, more than the 13 positions" \
  "$eval" --model "$model" --multiple-choice "$fixture" --seq 13
good=$(head -n 1 "$fixture")
bad() { printf '%s\n\n%s\n' "$good" "$1" > bad.jsonl; expect_fail 1 "bad.jsonl line 3: $2" \
  "$eval" --model "$model" --multiple-choice bad.jsonl; }
bad '{"ctx": "a", "label": 0}' 'no "endings"'
bad '{"ctx": "a", "endings": ["b", "c"], "label": 2}' '"label" is not an ending'"'"'s index (0 to 1)'
bad '{"ctx": "a", "endings": ["b", "c"], "label": 1.5}' '"label" is not an ending'"'"'s index'
bad '{"ctx": "a", "endings": ["b"], "label": 0}' '"endings" has 1 string; at least 2'
bad '{"ctx": "a", "endings": ["b", 3], "label": 0}' '"endings" is not an array of strings'
bad '{"ctx": "a\q", "endings": ["b", "c"], "label": 0}' 'a string has an unknown escape'
bad '{"ctx": "a", "endings": ["b", "c"], "label": 0} x' 'text after the object'
bad '{"ctx": "a", "endings": ["b", "c"], "label": 0' "expected ',' or '}'"
bad '["ctx", "a"]' 'not a JSON object'
bad '{"ctx": "", "endings": ["b", "c"], "label": 0}' '"ctx" is empty'
: > empty.jsonl
expect_fail 1 "empty.jsonl has no examples" "$eval" --model "$model" --multiple-choice empty.jsonl
expect_fail 1 "cannot read --multiple-choice nosuch.jsonl" "$eval" --model "$model" --multiple-choice nosuch.jsonl
expect_fail 2 "one of --text, --tokens or --multiple-choice" \
  "$eval" --model "$model" --multiple-choice "$fixture" --text ctx0.txt
expect_fail 2 "--details x: goes with --multiple-choice" "$eval" --model "$model" --text ctx0.txt --details x
echo "eval_mc: all checks passed"
