#!/usr/bin/env bash
# check_exported_symbols.sh <libgptx.so> <header dir or header>...
#
# Fails unless
#   * every dynamic symbol defined by the library starts with gptx_ (the
#     version node symbols GPTX_* are ignored) and carries a GPTX_* version,
#   * the exported gptx_* symbols are exactly the names declared GPTX_API in
#     the public headers (a header dir means all its *.h), both ways,
#   * each carries its header's version node: GPTX_EXPERIMENTAL for
#     gptx_experimental.h (no ABI promise), the stable node for every other
#     header (GPTX_1; override with GPTX_STABLE_NODE), and
#   * the SONAME is libgptx.so.1 (override with GPTX_EXPECTED_SONAME).
# Tools: NM [nm], READELF [readelf].
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 <libgptx.so> <include/gptx dir or header>..." >&2
    exit 2
fi
lib=$1
shift
NM=${NM:-nm}
READELF=${READELF:-readelf}
expected_soname=${GPTX_EXPECTED_SONAME:-libgptx.so.1}
stable_node=${GPTX_STABLE_NODE:-GPTX_1}
status=0
problem() { printf 'exported_symbols: FAIL: %s\n' "$*" >&2; status=1; }

[ -f "$lib" ] || { echo "exported_symbols: no such library: $lib" >&2; exit 1; }

headers=()
for arg in "$@"; do
    if [ -d "$arg" ]; then
        for h in "$arg"/*.h; do
            [ -e "$h" ] && headers+=("$h")
        done
    else
        headers+=("$arg")
    fi
done
[ ${#headers[@]} -gt 0 ] || { echo "exported_symbols: no headers given" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- names declared GPTX_API in the headers --------------------------------
# Join backslash continuations, drop preprocessor lines and comments, then cut
# the text into declarations at ; { } so that a declaration spanning several
# lines becomes one line. A function's name is the identifier right before its
# first '('; a variable's (no '(') is its last gptx_ identifier.
# shellcheck disable=SC2020 # tr maps each of ; { } to a newline
declared_api() {
    local h
    for h in "$@"; do
        cat "$h"
        echo
    done |
        sed -e ':a' -e '/\\$/{N' -e 's/\\\n//' -e 'ba' -e '}' |
        sed -e '/^[[:space:]]*#/d' |
        sed -e '/\/\*\|\*\//!s://.*$::' |
        tr '\n' ' ' |
        sed -e 's:/\*\([^*]\|\*\+[^*/]\)*\*\+/: :g' |
        tr ';{}' '\n\n\n' |
        grep -w 'GPTX_API' |
        sed -n -e 's/^[^(]*\<\(gptx_[a-z0-9_]*\)[[:space:]]*(.*$/\1/p' \
               -e 't' \
               -e 's/^[^(]*\<\(gptx_[a-z0-9_]*\)[[:space:]]*\(\[[^]]*\][[:space:]]*\)*$/\1/p' |
        LC_ALL=C sort -u
}
declared_api "${headers[@]}" >"$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
    echo "exported_symbols: found no GPTX_API declarations in: ${headers[*]}" >&2
    exit 1
fi
# the version node each declared name must carry ("name node" lines)
: >"$tmp/want_nodes"
for h in "${headers[@]}"; do
    node=$stable_node
    [ "$(basename "$h")" = gptx_experimental.h ] && node=GPTX_EXPERIMENTAL
    declared_api "$h" | sed "s/\$/ $node/" >>"$tmp/want_nodes"
done
LC_ALL=C sort -u -o "$tmp/want_nodes" "$tmp/want_nodes"

# ---- names the library exports ---------------------------------------------
# nm -D prints "<value> <type> <name>[@@VERSION]"; each version node shows as
# an absolute symbol ("GPTX_1", "GPTX_EXPERIMENTAL").
"$NM" -D --defined-only "$lib" >"$tmp/nm" || { echo "exported_symbols: $NM failed" >&2; exit 1; }
: >"$tmp/exported"
: >"$tmp/got_nodes"
: >"$tmp/foreign"
: >"$tmp/unversioned"
while read -r _value type sym; do
    [ -n "${sym:-}" ] || continue
    name=${sym%%@*}
    version=
    case $sym in *@*) version=${sym##*@} ;; esac
    if [ "$type" = A ] && [[ $name =~ ^GPTX_[A-Z0-9_.]+$ ]]; then
        continue # version node
    fi
    if [[ $name != gptx_* ]]; then
        echo "$type $sym" >>"$tmp/foreign"
        continue
    fi
    [[ $version == GPTX_* ]] || echo "$type $sym" >>"$tmp/unversioned"
    echo "$name" >>"$tmp/exported"
    echo "$name ${version:-none}" >>"$tmp/got_nodes"
done <"$tmp/nm"
LC_ALL=C sort -u -o "$tmp/exported" "$tmp/exported"
LC_ALL=C sort -u -o "$tmp/got_nodes" "$tmp/got_nodes"

if [ -s "$tmp/foreign" ]; then
    problem "$lib exports symbols outside the gptx_ namespace (check lib/core/gptx.map):"
    sed 's/^/    /' "$tmp/foreign" >&2
fi
if [ -s "$tmp/unversioned" ]; then
    problem "exported symbols without a GPTX_* symbol version (is lib/core/gptx.map applied?):"
    sed 's/^/    /' "$tmp/unversioned" >&2
fi

LC_ALL=C comm -23 "$tmp/declared" "$tmp/exported" >"$tmp/missing"
LC_ALL=C comm -13 "$tmp/declared" "$tmp/exported" >"$tmp/unexpected"
if [ -s "$tmp/missing" ]; then
    problem "declared GPTX_API in the headers but not exported by $lib (list them in lib/core/gptx.map):"
    sed 's/^/    - /' "$tmp/missing" >&2
fi
if [ -s "$tmp/unexpected" ]; then
    problem "exported by $lib but not declared GPTX_API in the headers:"
    sed 's/^/    + /' "$tmp/unexpected" >&2
fi

# names exported under another node than their header's (declared and
# exported names only: the lists above report the rest)
LC_ALL=C join "$tmp/want_nodes" "$tmp/got_nodes" | awk '$2 != $3' >"$tmp/wrong_node"
if [ -s "$tmp/wrong_node" ]; then
    problem "exported under another version node than their header's (name, wanted, got; see lib/core/gptx.map):"
    sed 's/^/    /' "$tmp/wrong_node" >&2
fi

# ---- SONAME ----------------------------------------------------------------
soname=$("$READELF" -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [ "$soname" != "$expected_soname" ]; then
    problem "SONAME of $lib is '${soname}', expected '$expected_soname'"
fi

echo "exported_symbols: $(wc -l <"$tmp/declared") declared, $(wc -l <"$tmp/exported") exported, SONAME ${soname:-none}"
if [ $status -eq 0 ]; then
    echo "exported_symbols: ok"
fi
exit $status
