#!/usr/bin/env bash
# One rule for "<|endoftext|>" in text (examples/common/prog_text.h): the four
# programs that read text take the same --special-tokens text|allow, with the
# same default (text), and give one text the same number of tokens under each
# setting: gptx-tokenize (--input), gptx-eval (--text), gptx-train (--text)
# and gptx-generate (--prompt-file). With allow every tag is one id 50256
# (counted in the shards), with text none is; bad values exit 2 naming the flag.
set -euo pipefail
train=$1 eval=$2 generate=$3 tokenize=$4 data=$5 work=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work"

# 1,200 words of the story with a tag after every 40th, and the awkward
# neighbours: glued to words, doubled, a tag cut short, one at the very end
tr -s ' \n' '  ' < "$data/the-verdict.txt" | cut -d' ' -f1-1200 |
  awk '{ for (i = 1; i <= NF; i++) { printf "%s ", $i; if (i % 40 == 0) printf "<|endoftext|>" } }' > tags.txt
printf 'end<|endoftext|><|endoftext|> and <|endoftext| half, then the last<|endoftext|>' >> tags.txt
tags=$(grep -o '<|endoftext|>' tags.txt | wc -l)
[ "$tags" -eq 33 ] || { echo "the text has $tags tags, want 33"; exit 1; }

# a model to run eval and generate with (the trainer's micro preset, 1 step)
"$train" --preset micro --threads 2 --steps 1 --eval-every 0 --sample-tokens 0 --out-dir m > /dev/null
model=m/model.safetensors

counts() { # label [flag...]: the four programs' token counts of tags.txt, one line
  local t e g r label=$1; shift
  t=$("$tokenize" --input tags.txt --out-dir "tok_$label" --prefix t "$@" | sed -n 's/.* -> \([0-9]*\) tokens.*/\1/p')
  e=$("$eval" --model "$model" --text tags.txt --threads 2 "$@" | sed -n 's/^data .*, \([0-9]*\) tokens.*/\1/p')
  r=$("$train" --preset micro --threads 2 --steps 1 --eval-every 0 --sample-tokens 0 --text tags.txt \
        --out-dir "tr_$label" "$@" | sed -n 's/^text .*: \([0-9]*\) tokens.*/\1/p')
  g=$("$generate" --model "$model" --prompt-file tags.txt --max-tokens 0 --threads 2 "$@" 2>&1 >/dev/null |
        sed -n 's/^gptx-generate: \([0-9]*\) prompt tokens.*/\1/p')
  echo "$t $e $r $g"
}
eot_ids() { # the number of id 50256 in a train shard of uint16 ids (header: 256 int32)
  od -An -v -tu2 -j 1024 "$1"/t_train.bin | tr -s ' ' '\n' | grep -c '^50256$' || true
}
same() { # label "a b c d": all four equal
  read -r a b c d <<< "$2"
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && [ "$a" = "$d" ] ||
    { echo "$1: tokenize, eval, train, generate counted '$2'"; exit 1; }
  echo "ok: $1: all four programs count $a tokens"
}
text=$(counts text --special-tokens text); same "--special-tokens text" "$text"
allow=$(counts allow --special-tokens allow); same "--special-tokens allow" "$allow"
default=$(counts default); same "no flag" "$default"
[ "$default" = "$text" ] || { echo "the default ($default) is not text ($text)"; exit 1; }
n_text=${text%% *} n_allow=${allow%% *}
[ "$n_allow" -lt "$n_text" ] || { echo "allow ($n_allow) should give fewer tokens than text ($n_text)"; exit 1; }

# what each setting means, in the ids: allow makes each tag one 50256, text none
"$tokenize" --input tags.txt --out-dir ids_allow --prefix t --special-tokens allow --val-fraction 0 > /dev/null
"$tokenize" --input tags.txt --out-dir ids_text --prefix t --val-fraction 0 > /dev/null
[ "$(eot_ids ids_allow)" -eq "$tags" ] || { echo "allow: $(eot_ids ids_allow) EOT ids for $tags tags"; exit 1; }
[ "$(eot_ids ids_text)" -eq 0 ] || { echo "text: $(eot_ids ids_text) EOT ids, want 0"; exit 1; }
echo "ok: allow gives $tags EOT ids (one per tag), text none ($n_allow vs $n_text tokens)"

# the older spelling --special still means allow in gptx-eval and gptx-tokenize
[ "$("$eval" --model "$model" --text tags.txt --threads 2 --special | sed -n 's/^data .*, \([0-9]*\) tokens.*/\1/p')" = "$n_allow" ]
[ "$("$tokenize" --input tags.txt --out-dir old --special | sed -n 's/.* -> \([0-9]*\) tokens.*/\1/p')" = "$n_allow" ]
echo "ok: --special is --special-tokens allow"

bad() { # program args...: exit 2 naming the flag and the choices
  set +e; msg=$("$@" --special-tokens yes 2>&1 >/dev/null); rc=$?; set -e
  [ "$rc" -eq 2 ] && [[ "$msg" == *"--special-tokens yes"*"text"*"allow"* ]] ||
    { echo "'$* --special-tokens yes': rc $rc: $msg"; exit 1; }
}
bad "$tokenize" --input tags.txt --out-dir bad
bad "$eval" --model "$model" --text tags.txt
bad "$train" --out-dir bad
bad "$generate" --model "$model"
echo "ok: --special-tokens yes -> exit 2 in each program"
echo "special_tokens: all checks passed"
