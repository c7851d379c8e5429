#!/usr/bin/env bash
# abi_check.sh [--update] <libgptx.so> <include/gptx dir> <recorded .abi>
#
# Check mode (default) compares two abidw dumps with their records (abidiff):
#  1. <recorded .abi> (abi/libgptx.so.1.abi): the ABI of <libgptx.so> -- its
#     exported functions and the public types they reach -- read from the
#     library's DWARF, restricted to the stable header gptx.h (--header-file).
#  2. <dir of recorded .abi>/gptx_public_types.abi: every type gptx.h
#     typedefs (gptx_status, gptx_backend_kind, ... ), dumped from a tiny
#     library compiled here with one function that takes them all. The API
#     passes enums as `int`, so (1) alone would not see, e.g., a renumbered
#     GPTX_ERR_* value.
# Only the stable part is recorded: the functions of gptx_experimental.h
# (symbol version GPTX_EXPERIMENTAL) and its types carry no ABI promise and
# are left out, so adding or changing an experimental knob needs no update.
# Any reported change fails; if it is intended, refresh the records with
# `cmake --build <build> --target abi-update` and commit them.
# Update mode (--update) rewrites both records.
#
# The ABI is read from DWARF: without debug info (e.g. a Release build) the
# check cannot say anything and is skipped (exit 77), as it is when abidw or
# abidiff are missing -- unless GPTX_ABI_CHECK_STRICT=1, then both fail.
# Tools: ABIDW [abidw], ABIDIFF [abidiff], READELF [readelf], CC [cc].
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
CC=${CC:-cc}
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
headers=$(cd "$headers" && pwd)
include_root=$(cd "$headers/.." && pwd)
source_root=$(cd "$headers/../.." && pwd)
types_record="$(dirname "$record")/gptx_public_types.abi"
stable_header="$headers/gptx.h"
[ -f "$stable_header" ] || { echo "abi_check: no stable header $stable_header" >&2; exit 1; }
for tool in "$ABIDW" "$ABIDIFF" "$CC"; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found (abidw/abidiff: install abigail-tools)"
done
if ! "$READELF" -S --wide "$lib" | grep -q '[[:space:]]\.debug_info[[:space:]]'; then
    skip "$lib has no DWARF debug info (build with CMAKE_BUILD_TYPE=RelWithDebInfo or Debug)"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The experimental functions (version node GPTX_EXPERIMENTAL) stay out of the
# record. abidw 2.2 ignores symbol_version in a suppression, so they are
# named: read from the library's own dynamic symbols.
NM=${NM:-nm}
write_suppressions() { # <elf> <out file>
    local names
    names=$("$NM" -D --defined-only "$1" | sed -n 's/.* \(gptx_[a-z0-9_]*\)@@GPTX_EXPERIMENTAL$/\1/p' |
        paste -sd'|')
    : >"$2"
    [ -n "$names" ] || return 0
    printf '[suppress_function]\n  symbol_name_regexp = ^(%s)$\n  drop = yes\n' "$names" >"$2"
}

# abidw with options that keep the dump independent of where the tree and the
# build live (no corpus/compilation paths, no source locations) and of the
# DT_NEEDED list (which changes with sanitizers); only exported interfaces
# and the public types they use (private types stay declaration-only).
dump_abi() { # <elf> <out file>
    write_suppressions "$1" "$tmp/experimental.suppr"
    "$ABIDW" --header-file "$stable_header" --drop-private-types --drop-undefined-syms \
        --suppressions "$tmp/experimental.suppr" \
        --no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed \
        --no-architecture --out-file "$2" "$1"
    # Translation units are named by absolute source path; make them relative
    # to the source tree so the record does not depend on the checkout path
    # (abidiff ignores these names anyway).
    local root esc
    for root in "$source_root" "$(cd "$source_root" && pwd -P)"; do
        esc=$(printf '%s' "$root/" | sed 's/[][\\.*^$|&]/\\&/g')
        sed -i "s|path='$esc|path='|" "$2"
    done
}

# Names the stable header typedefs (last identifier of each typedef, with the
# bodies of struct/enum definitions removed; (*name) for function pointers).
public_typedefs() {
    cat "$stable_header" |
        sed -e ':a' -e '/\\$/{N' -e 's/\\\n//' -e 'ba' -e '}' |
        sed -e '/^[[:space:]]*#[[:space:]]*ifdef[[:space:]]*__cplusplus/,/^[[:space:]]*#[[:space:]]*endif/d' |
        sed -e '/^[[:space:]]*#/d' |
        sed -e '/\/\*\|\*\//!s://.*$::' |
        tr '\n' ' ' |
        sed -e 's:/\*\([^*]\|\*\+[^*/]\)*\*\+/: :g' \
            -e ':b' -e 's/{[^{}]*}/ /g' -e 'tb' |
        tr ';' '\n' |
        grep -w typedef |
        sed -n -e 's/.*(\*[[:space:]]*\(gptx_[a-z0-9_]*\)[[:space:]]*).*/\1/p' -e 't' \
               -e 's/.*\<\(gptx_[a-z0-9_]*\)[[:space:]]*$/\1/p' |
        LC_ALL=C sort -u
}

# A shared library with one function per public type, taking a pointer to
# it, so abidw records all of them with their members and enumerators (a new
# type shows up as an added function probe_<name>).
dump_public_types() { # <out file>
    local names n h
    names=$(public_typedefs) || true
    [ -n "$names" ] || { echo "abi_check: no typedefs found in $headers" >&2; exit 1; }
    {
        echo "/* generated by tests/packaging/abi_check.sh */"
        echo "#include <gptx/gptx.h>"
        for n in $names; do
            printf 'GPTX_API void probe_%s(%s *p);\n' "$n" "$n"
            printf 'void probe_%s(%s *p) { (void)p; }\n' "$n" "$n"
        done
    } >"$tmp/gptx_public_types.c"
    (cd "$tmp" && "$CC" -std=c11 -g -O0 -fPIC -shared -fvisibility=hidden \
        -I"$include_root" gptx_public_types.c -o libgptx_public_types.so) ||
        { echo "abi_check: compiling the public-types probe failed" >&2; exit 1; }
    dump_abi "$tmp/libgptx_public_types.so" "$1"
}

if [ "$update" = 1 ]; then
    mkdir -p "$(dirname "$record")"
    dump_abi "$lib" "$tmp/lib.abi"
    dump_public_types "$tmp/types.abi"
    cp "$tmp/lib.abi" "$record"
    cp "$tmp/types.abi" "$types_record"
    echo "abi_check: wrote $record from $lib"
    echo "abi_check: wrote $types_record from the public headers in $headers"
    exit 0
fi

refresh_hint() {
    echo "If the change is intended, refresh the records and commit them:" >&2
    if [ -n "${GPTX_BUILD_DIR:-}" ]; then
        echo "    cmake --build ${GPTX_BUILD_DIR} --target abi-update" >&2
    else
        echo "    cmake --build <build dir> --target abi-update" >&2
    fi
    echo "or  $here/abi_check.sh --update $lib $headers $record" >&2
}

compare() { # <what> <record> <current dump>
    local what=$1 rec=$2 cur=$3 rc
    if [ ! -f "$rec" ]; then
        echo "abi_check: FAIL: no recorded ABI at $rec" >&2
        return 1
    fi
    set +e
    "$ABIDIFF" --no-default-suppression "$rec" "$cur" >"$tmp/diff" 2>&1
    rc=$?
    set -e
    if [ $rc -eq 0 ]; then
        echo "abi_check: ok, $what matches $rec"
        return 0
    fi
    echo "abi_check: FAIL: $what differs from $rec (abidiff exit $rc)" >&2
    if [ $((rc & 8)) -ne 0 ]; then
        echo "abi_check: the change is INCOMPATIBLE (e.g. a removed function): it breaks" \
            "binaries built against libgptx.so.0" >&2
    elif [ $((rc & 4)) -ne 0 ]; then
        echo "abi_check: the ABI changed: read the report below. Changed layouts, values or" \
            "signatures of public types/functions break existing binaries (needs a SONAME" \
            "bump); additions (new functions, new enumerators, fields appended to" \
            "struct_size-versioned options) are compatible but must be recorded" >&2
    else
        echo "abi_check: abidiff itself failed" >&2
    fi
    echo "----- abidiff $rec <current> -----" >&2
    cat "$tmp/diff" >&2
    echo "-----" >&2
    return 1
}

status=0
dump_abi "$lib" "$tmp/lib.abi"
compare "the ABI of $lib" "$record" "$tmp/lib.abi" || status=1
dump_public_types "$tmp/types.abi"
compare "the types of the public headers" "$types_record" "$tmp/types.abi" || status=1
if [ $status -ne 0 ]; then
    refresh_hint
fi
exit $status
