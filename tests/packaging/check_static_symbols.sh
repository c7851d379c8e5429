#!/usr/bin/env bash
# check_static_symbols.sh <libgptx.a>
#
# A program that links libgptx.a statically shares one global namespace with
# the library's internals, so every global symbol the archive defines must
# carry the gptx_ prefix (internal functions included: only `static` ones may
# go without). Fails with the list of offenders, each with its object file.
# C++ symbols of the CUDA backend count by their raw (mangled) name: declare
# them extern "C". ASan's per-global markers (__odr_asan.<name>) count as the
# global they mark. Tools: NM [nm].
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 <libgptx.a>" >&2
    exit 2
fi
lib=$1
NM=${NM:-nm}
[ -f "$lib" ] || { echo "static_symbols: no such archive: $lib" >&2; exit 1; }

# nm -P prints "archive[member]:" before each member, then "name type value
# size"; -g keeps global symbols (weak and common ones included).
listing=$("$NM" -g -P --defined-only "$lib") || { echo "static_symbols: $NM failed" >&2; exit 1; }
offenders=$(printf '%s\n' "$listing" | awk '
    /:$/ { member = $1; sub(/:$/, "", member); next }
    NF >= 2 {
        name = $1
        sub(/^__odr_asan\./, "", name) # the ASan marker of the global it follows
        if (name !~ /^gptx_/) print "    " $1 " (" $2 ") in " member
    }')
total=$(printf '%s\n' "$listing" | awk '!/:$/ && NF >= 2' | wc -l)
if [ -n "$offenders" ]; then
    echo "static_symbols: FAIL: $lib defines global symbols without the gptx_ prefix" \
        "(make them static, or rename them gptx_*):" >&2
    printf '%s\n' "$offenders" >&2
    exit 1
fi
echo "static_symbols: ok, all $total global symbols of $lib start with gptx_"
