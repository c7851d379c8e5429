#!/usr/bin/env bash
# gptx-tokenize on a corpus of several files (gptx_tokenize_stream.h,
# gptx_tokenize_shards.h, examples/common/prog_inputs.h). One part per run:
#   threads    the ids at 1, 2 and 4 threads (and with small blocks) are the same
#   shards     fixed-size llm.c shards: headers, sizes, train and val numbered
#              together, the manifest
#   split      validation held out from the whole corpus, piece by piece
#              (gptx_tokenize_split.h): whole documents on one side, the
#              share, every token once, content decides, the seed
#   documents  many files (and --doc-separator) = their concatenation with an
#              <|endoftext|> before each document, encoded whole
#   resume     a killed run is refused without --resume, and resumed to shards
#              identical to an uninterrupted run's; other settings are refused
#   inputs     lists, globs and folders sorted (order-free); errors and exit codes
#   progress   a progress line on a terminal (a pseudo-terminal from script(1)),
#              nothing on stderr when it is a file
# usage: tokenize_corpus.sh PART GPTX_TOKENIZE WORK_DIR [DATA_DIR]
set -euo pipefail
part=$1 tok=$2 work=$3/$1 data=${4:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL ($part): $*"; exit 1; }

# The corpus: unicode, long runs of spaces and newlines, CRLF, a file with no
# trailing newline, an empty file, a hidden file and a subfolder (skipped).
mkdir -p corpus/sub
for i in 1 2 3 4 5 6; do
  {
    for j in $(seq 1 40); do
      printf 'Doc %d line %d: caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e %d\n' "$i" "$j" $((i * j))
      [ $((j % 7)) -eq 0 ] && printf '    \t   %*s\n\n\n\n' $((j * 3)) ''
      [ $((j % 11)) -eq 0 ] && printf 'emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x80!! CRLF\r\n'
    done
    printf 'the end of %d, no newline' "$i"
  } > "corpus/part$i.txt"
done
: > corpus/empty.txt
printf 'hidden\n' > corpus/.hidden.txt
printf 'in a subfolder\n' > corpus/sub/nested.txt
files=$(printf 'corpus/part%d.txt\n' 1 2 3 4 5 6 | sort)

body() { tail -c +1025 "$1"; } # a shard's ids without its 1024-byte header
all_ids() { # dir name: the ids of every shard, train and val, in the order written, as bytes
  local d=$1 n=$2
  for f in $(ls "$d" | grep -E "^${n}_(train|val)_[0-9]{6}\.bin$" | sort -t_ -k3); do body "$d/$f"; done
}
kind_ids() { # dir name kind: the ids of that kind's shards in order
  local d=$1 n=$2 k=$3
  for f in $(ls "$d" | grep -E "^${n}_${k}_[0-9]{6}\.bin$" | sort); do body "$d/$f"; done
}
documents() { # < ids as bytes: one line per document (from each <|endoftext|>), its ids
  perl -e 'local $/; my @ids = unpack("v*", <STDIN>); my @doc;
    for my $t (@ids) { if ($t == 50256 && @doc) { print "@doc\n"; @doc = () } push @doc, $t }
    print "@doc\n" if @doc;'
}
header() { od -An -v -t d4 -N 12 "$1" | tr -s ' ' ' ' | sed 's/^ //'; } # magic version count

case $part in
threads)
  for t in 1 2 4; do
    "$tok" --input corpus --out-dir "t$t" --prefix c --shard-tokens 700 --threads "$t" > /dev/null
    "$tok" --input corpus --out-dir "s$t" --prefix c --shard-tokens 700 --threads "$t" --chunk-bytes 64 > /dev/null
  done
  for d in t2 t4 s1 s2 s4; do
    diff -r t1 "$d" > /dev/null || fail "the shards of $d differ from one thread's (t1): $(diff -rq t1 "$d" | head -2)"
  done
  echo "ok: the same shards at 1, 2 and 4 threads, with 4 MiB and 64-byte blocks ($(ls t1 | wc -l) files)"
  ;;
shards)
  N=500
  "$tok" --input corpus --out-dir s --prefix c --shard-tokens $N --threads 2 --val-fraction 0.5 > out.txt
  [ -f s/c.manifest ] || fail "no manifest"
  total=$(sed -n 's/^tokens //p' s/c.manifest)
  k=$(grep -c '^shard ' s/c.manifest)
  [ "$(ls s | grep -c '\.bin$')" -eq "$k" ] || fail "the folder holds other than the manifest's $k shards: $(ls s)"
  sum=0
  for kind in train val; do
    kt=$(sed -n "s/^${kind}_tokens //p" s/c.manifest)
    kn=$(grep -c "^shard c_${kind}_" s/c.manifest || true)
    [ "$kn" -eq $(( (kt + N - 1) / N )) ] || fail "$kn $kind shards for $kt tokens of $N a shard"
    i=0
    while read -r _ name count; do
      want=$N; [ $i -eq $((kn - 1)) ] && want=$((kt - (kn - 1) * N))
      [ "$count" -eq "$want" ] || fail "$name: the manifest says $count tokens, want $want"
      [ "$(header "s/$name")" = "20240520 1 $want" ] || fail "$name: header '$(header "s/$name")', want '20240520 1 $want'"
      [ "$(stat -c %s "s/$name")" -eq $((1024 + 2 * want)) ] || fail "$name: $(stat -c %s "s/$name") bytes, want $((1024 + 2 * want))"
      sum=$((sum + count)) i=$((i + 1))
    done < <(grep "^shard c_${kind}_" s/c.manifest)
    [ "$kn" -ge 1 ] || fail "no $kind shard"
  done
  [ "$sum" -eq "$total" ] || fail "the shards hold $sum tokens, the manifest says $total"
  # one numbering for both kinds, 0 .. k-1, in the order written
  seq -f "%06g" 0 $((k - 1)) | cmp -s - <(grep '^shard ' s/c.manifest | sed 's/.*_\([0-9]*\)\.bin .*/\1/') ||
    fail "the shards are not numbered 0..$((k - 1)): $(grep '^shard ' s/c.manifest | head -4)"
  for f in $files; do grep -q " $f\$" s/c.manifest || fail "the manifest lacks the input $f"; done
  grep -q '^gptx-tokenize shards 2$' s/c.manifest && grep -q '^val_fraction 0.5$' s/c.manifest &&
    grep -q '^val_seed 1337$' s/c.manifest && grep -q '^val_piece_tokens 4096$' s/c.manifest ||
    fail "the manifest does not state the split: $(head -8 s/c.manifest)"
  echo "ok: $k shards of at most $N tokens, train and val numbered together, llm.c headers, the split stated"
  ;;
split)
  # 400 documents of 3 kinds (one repeated word for word), separated by "%%"
  for d in $(seq 1 400); do
    case $((d % 3)) in
    0) printf 'Record %d: the quick brown fox %d jumps over %d lazy dogs.\n' "$d" $((d * 7)) $((d % 13)) ;;
    1) printf 'Entry number %d says hello to entry %d and goodbye to %d.\nIt ends here.\n' "$d" $((d + 1)) $((d - 1)) ;;
    2) printf 'The same paragraph, word for word, in many documents.\n' ;;
    esac
    printf '%%%%\n'
  done > docs.txt
  run() { "$tok" --input docs.txt --doc-separator '%%\n' --shard-tokens 2000 --prefix d "$@" > /dev/null; }
  run --out-dir all --val-fraction 0
  run --out-dir s20 --val-fraction 0.2
  run --out-dir s20b --val-fraction 0.2 --seed 8
  all_ids all d | documents | sort > all.docs
  kind_ids s20 d val | documents | sort > val.docs
  kind_ids s20 d train | documents | sort > train.docs
  # every document whole on one side, none lost or repeated
  sort -m val.docs train.docs | cmp -s - all.docs || fail "val + train are not the corpus's documents, each once"
  nd=$(wc -l < all.docs) nv=$(sort -u val.docs | wc -l) nu=$(sort -u all.docs | wc -l)
  [ "$nd" -eq 400 ] || fail "$nd documents, want 400"
  # a share of the distinct documents near 0.2 (binomial: 268 of them, sd 0.025)
  [ "$((nv * 100))" -ge "$((nu * 10))" ] && [ "$((nv * 100))" -le "$((nu * 30))" ] ||
    fail "$nv of $nu distinct documents held out at --val-fraction 0.2"
  # content decides: the repeated paragraph is all on one side
  same=$(all_ids all d | documents | sort | uniq -c | sort -rn | head -1 | awk '{ $1 = ""; print substr($0, 2) }')
  grep -qxF "$same" val.docs && grep -qxF "$same" train.docs && fail "the repeated document is on both sides"
  cmp -s <(kind_ids s20 d val) <(kind_ids s20b d val) && fail "--seed 8 held out the same documents as 1337"
  # a long document (a book) gives pieces of 4096 tokens to both sides
  if [ -n "$data" ]; then
    mkdir -p texts && cp "$data/the-verdict.txt" "$data/tinyshakespeare.txt" texts/
    "$tok" --input 'texts/*.txt' --out-dir w --prefix w --shard-tokens 65536 > /dev/null
    vt=$(sed -n 's/^val_tokens //p' w/w.manifest) tt=$(sed -n 's/^tokens //p' w/w.manifest)
    # the-verdict is 5145 tokens: a validation share above that holds Shakespeare
    [ "$vt" -gt 5145 ] && [ "$vt" -ge $((tt / 20)) ] && [ "$vt" -le $((tt / 5)) ] ||
      fail "the-verdict + tinyshakespeare: $vt of $tt tokens held out at 0.1"
    # which of Shakespeare's 4096-token pieces were held out: from all over the play
    "$tok" --input 'texts/*.txt' --out-dir w0 --prefix w --shard-tokens 65536 --val-fraction 0 > /dev/null
    held=$(perl -e '
      sub ids { local $/; open my $f, "<:raw", $_[0] or die; my $d = <$f>; unpack("v*", substr($d, 1024)) }
      my @all = map { ids($_) } @ARGV[1 .. $#ARGV];
      my $val = join(",", ids($ARGV[0]));
      my ($start) = grep { $all[$_] == 50256 } reverse 0 .. $#all;   # the last document: Shakespeare
      my @p; for (my $j = 0; $start + 4096 * $j < @all; $j++) {
        my $e = $start + 4096 * ($j + 1) - 1; $e = $#all if $e > $#all;
        push @p, $j if index(",$val,", "," . join(",", @all[$start + 4096 * $j .. $e]) . ",") >= 0 }
      print scalar(grep { 1 } 0 .. int(($#all - $start) / 4096)), " @p\n"' \
      w/w_val_*.bin $(ls w0/w_train_*.bin | sort))
    read -r np first rest <<< "$held"
    last=${rest##* }
    [ -n "$first" ] && [ "$first" -lt $((np / 3)) ] && [ "${last:-$first}" -gt $((2 * np / 3)) ] ||
      fail "the held-out pieces of Shakespeare's $np are not from all over it: $held"
    echo "ok: the-verdict + tinyshakespeare: $vt of $tt tokens held out, Shakespeare's pieces ${first}..${last:-$first} of $np"
  fi
  echo "ok: $nv of $nu distinct documents held out at 0.2, each whole, once; the repeated one on one side; another --seed, another set"
  ;;
documents)
  # the files one after the other, an <|endoftext|> before each (the empty
  # file is no document), encoded whole with the tag read as the token
  for f in $files; do printf '<|endoftext|>'; cat "$f"; done > concat.txt
  "$tok" --input concat.txt --out-dir whole --prefix w --special-tokens allow --val-fraction 0 > /dev/null
  "$tok" --input corpus --out-dir many --prefix m --shard-tokens 300 --threads 2 --chunk-bytes 100 --val-fraction 0 > /dev/null
  cmp <(all_ids many m) <(body whole/w_train.bin) || fail "the shards of the files differ from their concatenation with an <|endoftext|> before each"
  # --doc-separator: each part of a file is a document, the separator dropped,
  # an empty part (two separators in a row, one at the end) no document
  printf 'first doc\n%%%%\nsecond  doc\n\n%%%%\n\n%%%%\nthird\xc3\xa9 doc\n%%%%\n' > sep.txt
  printf '<|endoftext|>first doc<|endoftext|>second  doc\n<|endoftext|>third\xc3\xa9 doc' > sep_want.txt
  "$tok" --input sep.txt --out-dir sep --prefix s --shard-tokens 4 --doc-separator '\n%%\n' --chunk-bytes 64 --val-fraction 0 > /dev/null
  "$tok" --input sep_want.txt --out-dir sepw --prefix w --special-tokens allow --val-fraction 0 > /dev/null
  cmp <(all_ids sep s) <(body sepw/w_train.bin) || fail "--doc-separator: the documents differ from the parts between separators"
  echo "ok: $(echo "$files" | wc -l) files = their concatenation with EOTs; --doc-separator splits documents"
  ;;
resume)
  # documents of a line each, half of them held out: both kinds fill in turn,
  # so a kill leaves a partial shard of the other kind (NAME.pending_<k>.bin)
  common=(--input corpus --prefix c --shard-tokens 300 --doc-separator '\n' --val-fraction 0.5)
  args=(--out-dir r --chunk-bytes 256 --threads 2 "${common[@]}")
  "$tok" --out-dir whole --threads 1 "${common[@]}" > /dev/null
  # killed (SIGKILL) right after its 5th shard is written, before its record
  rc=0; GPTX_TOKENIZE_TEST_KILL_AFTER=5 "$tok" "${args[@]}" > /dev/null 2>&1 || rc=$?
  [ $rc -ne 0 ] || fail "the test hook did not stop the run"
  [ ! -e r/c.manifest ] || fail "a killed run left a manifest"
  rc=0; "$tok" "${args[@]}" > out.txt 2> err.txt || rc=$?
  pending=$(sed -n 's/^pending //p' r/c.progress)
  [ -n "$pending" ] && [ -f r/c.pending_000004.bin ] || fail "no pending ids recorded after 4 shards"
  [ "$(awk '{ print $2 + $4 }' <<< "$pending")" -gt 0 ] || fail "nothing pending after 4 shards: $pending"
  [ $rc -eq 1 ] && grep -q 'unfinished run of c (5 shards, first c_' err.txt ||
    fail "a folder with an unfinished run was not refused (exit $rc): $(cat err.txt)"
  rc=0; "$tok" --out-dir r --input corpus --prefix c --shard-tokens 301 --doc-separator '\n' \
    --val-fraction 0.5 --resume > out.txt 2> err.txt || rc=$?
  [ $rc -eq 1 ] && grep -q 'other inputs or settings' err.txt || fail "--resume with another --shard-tokens: exit $rc: $(cat err.txt)"
  GPTX_TOKENIZE_TEST_KILL_AFTER=8 "$tok" "${args[@]}" --resume > /dev/null 2>&1 || true # killed again
  "$tok" "${args[@]}" --resume > out.txt
  grep -q 'resuming after 7 shards' out.txt || fail "did not resume after the 7 recorded shards: $(cat out.txt)"
  diff -r whole r > /dev/null || fail "the resumed shards differ from an uninterrupted run's: $(diff -rq whole r | head -3)"
  "$tok" "${args[@]}" --resume | grep -q 'finished already' || fail "--resume of a finished run did something"
  "$tok" "${args[@]}" > /dev/null # a finished run is replaced
  diff -r whole r > /dev/null || fail "a finished run replaced differs"
  ls r | grep -q 'pending\|progress' && fail "a finished run left its progress record: $(ls r)"
  echo "ok: killed twice (pending $pending after 4 shards), refused without --resume, resumed to the uninterrupted run's shards"
  ;;
inputs)
  expect() { # exit-status message-substring args...
    local want=$1 msg=$2 rc=0; shift 2
    "$tok" --out-dir e --shard-tokens 1000 "$@" > out.txt 2> err.txt || rc=$?
    [ $rc -eq "$want" ] || fail "$*: exit $rc, want $want: $(cat err.txt)"
    grep -qF -- "$msg" err.txt || fail "$*: the message lacks '$msg': $(cat err.txt)"
  }
  "$tok" --input corpus --out-dir a --prefix c --shard-tokens 1000 > /dev/null
  rev=$(echo "$files" | sort -r | paste -sd, -)
  "$tok" --input "$rev,corpus/empty.txt,corpus/part1.txt" --out-dir b --prefix c --shard-tokens 1000 > /dev/null
  "$tok" --input 'corpus/part[4-6].txt,corpus/*1.txt,corpus/part?.txt,corpus/e*' --out-dir g --prefix c --shard-tokens 1000 > /dev/null
  cmp <(all_ids a c) <(all_ids b c) || fail "a reversed list (a path twice) gives other shards than the folder"
  cmp <(all_ids a c) <(all_ids g c) || fail "overlapping globs give other shards than the folder"
  grep -q 'hidden\|nested' a/c.manifest && fail "a hidden file or a subfolder's file was read"
  expect 1 "no file matches the pattern" --input 'corpus/*.md'
  mkdir -p emptydir/.dot && printf x > emptydir/.dot/f
  expect 1 "holds no regular file" --input emptydir
  mkfifo fifo
  expect 1 "fifo: not a regular file or a folder" --input corpus,fifo
  expect 1 "No such file or directory" --input corpus/nosuch.txt
  expect 2 "an empty entry" --input corpus/part1.txt,,corpus/part2.txt
  rc=0; "$tok" --input corpus --out-dir e > /dev/null 2> err.txt || rc=$?
  [ $rc -eq 2 ] && grep -q 'several files need --shard-tokens' err.txt || fail "several files without --shard-tokens: exit $rc: $(cat err.txt)"
  expect 2 "unknown escape" --input corpus --doc-separator 'a\q'
  echo "ok: lists, globs and folders sorted and deduplicated; errors named"
  ;;
progress)
  "$tok" --input corpus --out-dir p --shard-tokens 1000 > out.txt 2> err.txt
  [ ! -s err.txt ] || fail "stderr is a file, yet it got: $(head -c 300 err.txt)"
  command -v script > /dev/null || { echo "script(1) not found: skipped"; exit 77; }
  script -qec "$tok --input corpus --out-dir q --shard-tokens 1000" /dev/null > pty.out
  tr '\r' '\n' < pty.out | grep -a -E '^gptx-tokenize: [0-9.]+/[0-9.]+ MB \(100%\), [0-9.]+ MB/s, ETA 0m00s' > /dev/null ||
    fail "no progress line on a terminal: $(tr '\r' '\n' < pty.out | head -5)"
  echo "ok: $(tr '\r' '\n' < pty.out | grep -a 'MB/s' | tail -1 | sed 's/\x1b\[K//')"
  ;;
*) fail "unknown part" ;;
esac
