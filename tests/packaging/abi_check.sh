#!/usr/bin/env bash
# abi_check.sh [--update] <libgptx.so> <include/gptx dir> <recorded .abi>
#
# Check mode (default): dumps the ABI of <libgptx.so> restricted to the types
# and functions of the public headers with abidw and compares it with the
# recorded ABI (abi/libgptx.so.0.abi) with abidiff. Any reported change fails;
# if the change is intended, refresh the record (cmake --build <build> --target
# abi-update) and commit it.
# Update mode (--update): rewrites <recorded .abi> from <libgptx.so>.
#
# The ABI is read from DWARF: without debug info (e.g. a Release build) the
# check cannot say anything and is skipped (exit 77), as it is when abidw or
# abidiff are missing -- unless GPTX_ABI_CHECK_STRICT=1, then both fail.
# Tools: ABIDW [abidw], ABIDIFF [abidiff], READELF [readelf].
set -euo pipefail

update=0
if [ "${1:-}" = "--update" ]; then
    update=1
    shift
fi
if [ $# -ne 3 ]; then
    echo "usage: $0 [--update] <libgptx.so> <include/gptx dir> <recorded .abi>" >&2
    exit 2
fi
lib=$1
headers=$2
record=$3
ABIDW=${ABIDW:-abidw}
ABIDIFF=${ABIDIFF:-abidiff}
READELF=${READELF:-readelf}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

skip() {
    if [ "$update" = 1 ] || [ "${GPTX_ABI_CHECK_STRICT:-0}" = 1 ]; then
        echo "abi_check: FAIL: $*" >&2
        exit 1
    fi
    echo "abi_check: SKIPPED: $*"
    exit 77
}

[ -f "$lib" ] || { echo "abi_check: no such library: $lib" >&2; exit 1; }
[ -d "$headers" ] || { echo "abi_check: no such header dir: $headers" >&2; exit 1; }
for tool in "$ABIDW" "$ABIDIFF"; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found (install abigail-tools)"
done
if ! "$READELF" -S --wide "$lib" | grep -q '[[:space:]]\.debug_info[[:space:]]'; then
    skip "$lib has no DWARF debug info (build with CMAKE_BUILD_TYPE=RelWithDebInfo or Debug)"
fi

# Options that keep the dump independent of where the tree and the build
# live (no paths, no source locations) and of the DT_NEEDED list (which
# changes with sanitizers), so identical code gives an identical dump.
dump_abi() { # <out file>
    "$ABIDW" --headers-dir "$headers" --drop-private-types --drop-undefined-syms \
        --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed \
        --no-architecture --out-file "$1" "$lib"
    # Translation units are named by absolute source path: make them relative
    # to the source tree (<root>/include/gptx -> <root>) so the record does not
    # depend on where the tree is checked out (abidiff ignores these paths).
    local root esc
    root=$(cd "$headers/../.." && pwd -P)
    esc=$(printf '%s' "$root/" | sed 's/[][\\.*^$|&]/\\&/g')
    sed -i "s|path='$esc|path='|" "$1"
}

if [ "$update" = 1 ]; then
    mkdir -p "$(dirname "$record")"
    dump_abi "$record.tmp"
    mv "$record.tmp" "$record"
    echo "abi_check: wrote $record from $lib"
    exit 0
fi

refresh_hint() {
    echo "If the change is intended, refresh the record and commit it:" >&2
    if [ -n "${GPTX_BUILD_DIR:-}" ]; then
        echo "    cmake --build ${GPTX_BUILD_DIR} --target abi-update" >&2
    else
        echo "    cmake --build <build dir> --target abi-update" >&2
    fi
    echo "or  $here/abi_check.sh --update $lib $headers $record" >&2
}

if [ ! -f "$record" ]; then
    echo "abi_check: FAIL: no recorded ABI at $record" >&2
    refresh_hint
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dump_abi "$tmp/current.abi"

set +e
"$ABIDIFF" --no-default-suppression "$record" "$tmp/current.abi" >"$tmp/diff" 2>&1
rc=$?
set -e
if [ $rc -eq 0 ]; then
    echo "abi_check: ok, the ABI of $lib matches $record"
    exit 0
fi

echo "abi_check: FAIL: the ABI of $lib differs from $record (abidiff exit $rc)" >&2
if [ $((rc & 8)) -ne 0 ]; then
    echo "abi_check: the change is INCOMPATIBLE (e.g. a removed function): it breaks" \
        "binaries built against libgptx.so.0" >&2
elif [ $((rc & 4)) -ne 0 ]; then
    echo "abi_check: the ABI changed: read the report below. Changed layouts or signatures of" \
        "public types/functions break existing binaries (needs a SONAME bump); additions" \
        "(new functions, fields appended after struct_size-checked ones) are compatible" \
        "but must be recorded" >&2
else
    echo "abi_check: abidiff itself failed" >&2
fi
echo "----- abidiff $record <current> -----" >&2
cat "$tmp/diff" >&2
echo "-------------------------------------" >&2
refresh_hint
exit 1
