#!/usr/bin/env bash
# gptx-tokenize on a corpus of several files (gptx_tokenize_stream.h,
# gptx_tokenize_shards.h, examples/common/prog_inputs.h). One part per run:
#   threads    the ids at 1, 2 and 4 threads (and with small blocks) are the same
#   shards     fixed-size llm.c shards: headers, sizes, the first one val, the manifest
#   documents  many files (and --doc-separator) = their concatenation with an
#              <|endoftext|> before each document, encoded whole
#   resume     a killed run is refused without --resume, and resumed to shards
#              identical to an uninterrupted run's; other settings are refused
#   inputs     lists, globs and folders sorted (order-free); errors and exit codes
#   progress   a progress line on a terminal (a pseudo-terminal from script(1)),
#              nothing on stderr when it is a file
# usage: tokenize_corpus.sh PART GPTX_TOKENIZE WORK_DIR
set -euo pipefail
part=$1 tok=$2 work=$3/$1
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
all_ids() { # dir name: the ids of every shard in order, as bytes
  local d=$1 n=$2
  body "$d/${n}_val_000000.bin"
  for f in $(ls "$d" | grep "^${n}_train_[0-9]*\.bin$" | sort); do body "$d/$f"; done
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
  "$tok" --input corpus --out-dir s --prefix c --shard-tokens $N --threads 2 > out.txt
  [ -f s/c.manifest ] || fail "no manifest"
  total=$(sed -n 's/^tokens //p' s/c.manifest)
  k=$(grep -c '^shard ' s/c.manifest)
  [ "$k" -eq $(( (total + N - 1) / N )) ] || fail "$k shards for $total tokens of $N a shard"
  [ "$(ls s | grep -c '\.bin$')" -eq "$k" ] || fail "the folder holds other than the manifest's $k shards: $(ls s)"
  [ -f s/c_val_000000.bin ] && [ -f s/c_train_000001.bin ] || fail "not val first, then train: $(ls s | head -3)"
  i=0 sum=0
  while read -r _ name count; do
    want=$N; [ $i -eq $((k - 1)) ] && want=$((total - (k - 1) * N))
    [ "$count" -eq "$want" ] || fail "$name: the manifest says $count tokens, want $want"
    [ "$(header "s/$name")" = "20240520 1 $want" ] || fail "$name: header '$(header "s/$name")', want '20240520 1 $want'"
    [ "$(stat -c %s "s/$name")" -eq $((1024 + 2 * want)) ] || fail "$name: $(stat -c %s "s/$name") bytes, want $((1024 + 2 * want))"
    sum=$((sum + count)) i=$((i + 1))
  done < <(grep '^shard ' s/c.manifest)
  [ "$sum" -eq "$total" ] || fail "the shards hold $sum tokens, the manifest says $total"
  for f in $files; do grep -q " $f\$" s/c.manifest || fail "the manifest lacks the input $f"; done
  echo "ok: $k shards of $N tokens (the last $((total - (k - 1) * N))), llm.c headers, val first"
  ;;
documents)
  # the files one after the other, an <|endoftext|> before each (the empty
  # file is no document), encoded whole with the tag read as the token
  for f in $files; do printf '<|endoftext|>'; cat "$f"; done > concat.txt
  "$tok" --input concat.txt --out-dir whole --prefix w --special-tokens allow --val-fraction 0 > /dev/null
  "$tok" --input corpus --out-dir many --prefix m --shard-tokens 300 --threads 2 --chunk-bytes 100 > /dev/null
  cmp <(all_ids many m) <(body whole/w_train.bin) || fail "the shards of the files differ from their concatenation with an <|endoftext|> before each"
  # --doc-separator: each part of a file is a document, the separator dropped,
  # an empty part (two separators in a row, one at the end) no document
  printf 'first doc\n%%%%\nsecond  doc\n\n%%%%\n\n%%%%\nthird\xc3\xa9 doc\n%%%%\n' > sep.txt
  printf '<|endoftext|>first doc<|endoftext|>second  doc\n<|endoftext|>third\xc3\xa9 doc' > sep_want.txt
  "$tok" --input sep.txt --out-dir sep --prefix s --shard-tokens 4 --doc-separator '\n%%\n' --chunk-bytes 64 > /dev/null
  "$tok" --input sep_want.txt --out-dir sepw --prefix w --special-tokens allow --val-fraction 0 > /dev/null
  cmp <(all_ids sep s) <(body sepw/w_train.bin) || fail "--doc-separator: the documents differ from the parts between separators"
  echo "ok: $(echo "$files" | wc -l) files = their concatenation with EOTs; --doc-separator splits documents"
  ;;
resume)
  args=(--input corpus --out-dir r --prefix c --shard-tokens 300 --chunk-bytes 256 --threads 2)
  "$tok" --input corpus --out-dir whole --prefix c --shard-tokens 300 --threads 1 > /dev/null
  # killed (SIGKILL) right after its 5th shard is written, before its record
  rc=0; GPTX_TOKENIZE_TEST_KILL_AFTER=5 "$tok" "${args[@]}" > /dev/null 2>&1 || rc=$?
  [ $rc -ne 0 ] || fail "the test hook did not stop the run"
  [ ! -e r/c.manifest ] || fail "a killed run left a manifest"
  rc=0; "$tok" "${args[@]}" > out.txt 2> err.txt || rc=$?
  [ $rc -eq 1 ] && grep -q 'unfinished run of c (5 shards, first c_val_000000.bin' err.txt ||
    fail "a folder with an unfinished run was not refused (exit $rc): $(cat err.txt)"
  rc=0; "$tok" "${args[@]/300/301}" --resume > out.txt 2> err.txt || rc=$?
  [ $rc -eq 1 ] && grep -q 'other inputs or settings' err.txt || fail "--resume with another --shard-tokens: exit $rc: $(cat err.txt)"
  GPTX_TOKENIZE_TEST_KILL_AFTER=8 "$tok" "${args[@]}" --resume > /dev/null 2>&1 || true # killed again
  "$tok" "${args[@]}" --resume > out.txt
  grep -q 'resuming after 7 shards' out.txt || fail "did not resume after the 7 recorded shards: $(cat out.txt)"
  diff -r whole r > /dev/null || fail "the resumed shards differ from an uninterrupted run's: $(diff -rq whole r | head -3)"
  "$tok" "${args[@]}" --resume | grep -q 'finished already' || fail "--resume of a finished run did something"
  "$tok" "${args[@]}" > /dev/null # a finished run is replaced
  diff -r whole r > /dev/null || fail "a finished run replaced differs"
  echo "ok: killed twice, refused without --resume, resumed to the uninterrupted run's shards"
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
