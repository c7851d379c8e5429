#!/usr/bin/env bash
# install_downstream.sh <build dir> <work dir>
#
# Installs the gptx build in <build dir> into <work dir>/prefix, then builds
# and runs tests/packaging/downstream/main.c against the installed copy:
#   1. cc + pkg-config (gptx.pc), shared library, run with LD_LIBRARY_PATH;
#   2. CMake package, find_package(gptx 0.6 REQUIRED CONFIG) -> gptx::gptx;
#   3. CMake package -> gptx::gptx_static;
#   4. cc + pkg-config --libs gptx-static (the README's static recipe): no
#      libgptx.so dependency;
#   5. the installed programs, copied to another prefix, run with the source
#      and build trees hidden (unshare + tmpfs where allowed) and no
#      LD_LIBRARY_PATH: gptx-train, then gptx-generate on its model;
#   5b. a run with checkpoints, the prefix moved again, and --resume from the
#      new place: the bundled tokenizer is recorded as bundled (issue 35);
#   6. the prefix moved (mv): pkg-config --cflags --libs gptx and gptx-static
#      from the moved .pc files (prefix=${pcfiledir}/../..) build main.c
#      against the moved copy, and both programs run;
#   7. the README's consumer snippets as written (pkg-config with its rpath,
#      the static recipe, CMake C with an older version request, a C++
#      project with COMPONENTS: cuda where this gptx has it, else its clear
#      refusal), and find_package's version policy (one ABI generation:
#      0.2 up to this version answered; 0.1 and a newer version not).
# <work dir> is deleted first.
#
# Environment (set by tests/packaging/CMakeLists.txt; defaults in brackets):
#   CMAKE [cmake]  CC [cc]  CXX [c++, optional header check]
#   GPTX_CONFIG            build configuration for cmake --install --config
#   GPTX_VERSION           expected package version (checked if set)
#   GPTX_DOWNSTREAM_CFLAGS extra compile+link flags (sanitizer builds)
#   CMAKE_GENERATOR        generator for the downstream CMake builds
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 <gptx build dir> <work dir>" >&2
    exit 2
fi
build_dir=$(cd "$1" && pwd)
work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/downstream"
CMAKE=${CMAKE:-cmake}
CC=${CC:-cc}
CXX=${CXX:-c++}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
read -r -a extra_flags <<<"${GPTX_DOWNSTREAM_CFLAGS:-}"

step() { printf '\n=== %s\n' "$*"; }
fail() { printf 'install_downstream: FAIL: %s\n' "$*" >&2; exit 1; }
same_file() { [ -n "$1" ] && [ "$(readlink -f "$1")" = "$(readlink -f "$2")" ]; }

rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix="$work/prefix"

step "cmake --install $build_dir --prefix $prefix"
install_args=(--install "$build_dir" --prefix "$prefix")
if [ -n "${GPTX_CONFIG:-}" ]; then
    install_args+=(--config "$GPTX_CONFIG")
fi
"$CMAKE" "${install_args[@]}" || fail "cmake --install failed"

# ---- what got installed ----------------------------------------------------
pc=$(find "$prefix" -name gptx.pc -type f -print -quit)
[ -n "$pc" ] || fail "gptx.pc was not installed"
pcdir=$(dirname "$pc")
libdir=$(cd "$pcdir/.." && pwd)
for f in "$prefix/include/gptx/gptx.h" "$libdir/libgptx.so" "$libdir/libgptx.so.1" \
         "$libdir/libgptx.a" "$libdir/cmake/gptx/gptxConfig.cmake" \
         "$libdir/cmake/gptx/gptxConfigVersion.cmake" "$libdir/cmake/gptx/gptxTargets.cmake"; do
    [ -e "$f" ] || fail "missing installed file $f"
done
if readelf -d "$libdir/libgptx.so.1" | grep -E 'R(UN)?PATH' | grep -qF "$build_dir"; then
    fail "installed libgptx.so.1 still has an RPATH into the build tree"
fi
echo "installed into $prefix (libdir $libdir)"

# ---- 1. pkg-config ---------------------------------------------------------
step "pkg-config build"
export PKG_CONFIG_PATH="$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc_version=$("$PKG_CONFIG" --modversion gptx) || fail "pkg-config cannot read gptx.pc"
pc_prefix=$("$PKG_CONFIG" --variable=prefix gptx)
echo "gptx.pc: version $pc_version, prefix $pc_prefix"
[[ "$pc_prefix" == '${pcfiledir}'* ]] || [[ "$pc_prefix" == "$pcdir"* ]] ||
    fail "gptx.pc has prefix=$pc_prefix: not relative to the .pc file's folder"
same_file "$pc_prefix" "$prefix" || fail "gptx.pc's prefix=$pc_prefix is not $prefix"
if [ -n "${GPTX_VERSION:-}" ] && [ "$pc_version" != "$GPTX_VERSION" ]; then
    fail "gptx.pc has Version $pc_version, expected $GPTX_VERSION"
fi
"$PKG_CONFIG" --static --libs gptx | grep -q -- '-lopenblas' ||
    fail "pkg-config --static --libs gptx lacks -lopenblas"
read -r -a pc_cflags <<<"$("$PKG_CONFIG" --cflags gptx)"
read -r -a pc_libs <<<"$("$PKG_CONFIG" --libs gptx)"
(
    set -x
    "$CC" -std=c11 -Wall -Wextra -Wpedantic -Werror "${extra_flags[@]}" "${pc_cflags[@]}" \
        "$src/main.c" -o "$work/app_pkgconfig" "${pc_libs[@]}"
) || fail "building against gptx.pc failed"
if command -v "$CXX" >/dev/null 2>&1; then
    # The public header must also be usable from C++.
    printf '#include <gptx/gptx.h>\n#include <gptx/gptx_experimental.h>\nint main() { return gptx_version() == nullptr; }\n' |
        "$CXX" -x c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only \
            "${pc_cflags[@]}" - || fail "gptx.h does not compile as C++"
fi
readelf -d "$work/app_pkgconfig" | grep -q 'NEEDED.*\[libgptx\.so\.1\]' ||
    fail "app_pkgconfig does not depend on libgptx.so.1"
resolved=$(LD_LIBRARY_PATH="$libdir" ldd "$work/app_pkgconfig" | awk '$1 == "libgptx.so.1" { print $3 }')
same_file "$resolved" "$libdir/libgptx.so.1" ||
    fail "app_pkgconfig loads libgptx.so.1 from '$resolved', not from $libdir"
LD_LIBRARY_PATH="$libdir" "$work/app_pkgconfig" || fail "app_pkgconfig failed"

# ---- 2./3. CMake package ---------------------------------------------------
cmake_build() { # <name> <static ON|OFF>
    local name=$1 static=$2 bdir="$work/$1"
    step "CMake package build: $name (GPTX_DOWNSTREAM_STATIC=$static)"
    "$CMAKE" -S "$src" -B "$bdir" \
        -DCMAKE_PREFIX_PATH="$prefix" \
        -DGPTX_EXPECTED_PREFIX="$prefix" \
        -DGPTX_DOWNSTREAM_STATIC="$static" \
        -DCMAKE_C_COMPILER="$CC" \
        -DCMAKE_C_FLAGS="${GPTX_DOWNSTREAM_CFLAGS:-}" \
        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
        -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF ||
        fail "configuring the downstream CMake project ($name) failed"
    "$CMAKE" --build "$bdir" --verbose || fail "building the downstream CMake project ($name) failed"
    if [ "$static" = ON ]; then
        if readelf -d "$bdir/app" | grep -q 'NEEDED.*libgptx'; then
            fail "$name: app links libgptx.so although gptx::gptx_static was requested"
        fi
    else
        readelf -d "$bdir/app" | grep -q 'NEEDED.*\[libgptx\.so\.1\]' ||
            fail "$name: app does not depend on libgptx.so.1"
        # No LD_LIBRARY_PATH: CMake's build RPATH must point into the prefix.
        resolved=$(ldd "$bdir/app" | awk '$1 == "libgptx.so.1" { print $3 }')
        same_file "$resolved" "$libdir/libgptx.so.1" ||
            fail "$name: app loads libgptx.so.1 from '$resolved', not from $libdir"
    fi
    "$bdir/app" || fail "$name: app failed"
}
cmake_build cmake_shared OFF
cmake_build cmake_static ON

# ---- 4. the README's static recipe -------------------------------------------
step "pkg-config static build (gptx-static.pc)"
read -r -a st_cflags <<<"$("$PKG_CONFIG" --cflags gptx-static)"
read -r -a st_libs <<<"$("$PKG_CONFIG" --libs gptx-static)"
(
    set -x
    "$CC" -std=c11 -Wall -Wextra -Werror "${extra_flags[@]}" "${st_cflags[@]}" \
        "$src/main.c" -o "$work/app_static" "${st_libs[@]}" -lstdc++
) || fail "building with pkg-config --libs gptx-static failed"
if readelf -d "$work/app_static" | grep -q 'NEEDED.*libgptx'; then
    fail "app_static depends on libgptx.so: the static recipe linked the shared library"
fi
"$work/app_static" || fail "app_static failed"
echo "app_static: no libgptx.so dependency, runs"

# ---- 5. the installed programs, from a moved prefix ---------------------------
if [ ! -x "$prefix/bin/gptx-train" ]; then
    step "no programs installed (GPTX_BUILD_EXAMPLES off): skipped"
else
    step "installed programs: prefix moved, source and build trees hidden"
    for f in gpt2/encoder.json gpt2/vocab.bpe the-verdict.txt; do
        [ -s "$prefix/share/gptx/$f" ] || fail "data file share/gptx/$f was not installed"
    done
    for p in gptx-train gptx-generate gptx-eval gptx-tokenize gptx-export gptx-compare numerics_check; do
        rp=$(readelf -d "$prefix/bin/$p" | grep -E 'R(UN)?PATH' || true)
        [[ "$rp" == *'$ORIGIN'* ]] || fail "$p has no \$ORIGIN RUNPATH ($rp)"
        if [[ "$rp" == *"$build_dir"* ]]; then fail "$p has a RUNPATH into the build tree"; fi
    done
    srcdir=$(cd "$here/../.." && pwd)
    moved=$(mktemp -d /tmp/gptx-moved-prefix.XXXXXX)
    trap 'rm -rf "$moved"' EXIT
    cp -a "$prefix/." "$moved/"
    mkdir -p "$moved/run"
    cat > "$moved/run/walk.sh" <<'WALK'
set -euo pipefail
cd "$(dirname "$0")"
unset LD_LIBRARY_PATH GPTX_DATA_DIR
../bin/gptx-train > train.log   # no arguments: the main job
grep -q 'model: out/model.safetensors' train.log
[ -s out/model.safetensors ] && [ -s out/metrics.jsonl ]
../bin/gptx-generate --model out/model.safetensors --max-tokens 20 --threads 2 > gen.txt 2> gen.err
grep -q '^Every effort moves you' gen.txt
../bin/gptx-eval --model out/model.safetensors --text ../share/gptx/the-verdict.txt > eval.txt
grep -q '^loss ' eval.txt
../bin/gptx-export --model out/model.safetensors --format hf --out out/hf > export.txt
[ -s out/hf/model.safetensors ] && [ -s out/hf/vocab.json ] && [ -s out/hf/merges.txt ]
for p in gptx-train gptx-generate gptx-eval gptx-tokenize gptx-export gptx-compare numerics_check; do
    ../bin/$p --version | grep -q "^$p [0-9]"
done
../bin/gptx-tokenize --help > /dev/null
../bin/numerics_check > /dev/null
WALK
    # a run with checkpoints to resume after the next move (5b)
    cat >> "$moved/run/walk.sh" <<'WALK'
../bin/gptx-train --preset micro --steps 4 --checkpoint-every 2 --sample-tokens 0 --out-dir ck > ck.log
grep -q 'bundled:gpt2/encoder.json' ck/metrics.jsonl
WALK
    cat > "$moved/run/resume.sh" <<'WALK'
set -euo pipefail
cd "$(dirname "$0")"
unset LD_LIBRARY_PATH GPTX_DATA_DIR
../bin/gptx-train --resume ck --steps 6 > resume.log 2>&1
grep -q 'resumed from ck/checkpoint-00000004.safetensors at step 4' resume.log
[ -s ck/checkpoint-00000006.safetensors ]
WALK
    hidden="no (unshare unavailable: relied on the moved prefix and the RUNPATH check)"
    run_hidden() { # <script> <log files...>: with the source and build trees hidden where possible
        local script=$1; shift
        if unshare -m --propagation private true 2>/dev/null; then
            unshare -m --propagation private bash -c \
                'mount -t tmpfs none "$1" && mount -t tmpfs none "$2" && bash "$3"' _ \
                "$build_dir" "$srcdir" "$script" || { cat "$@" 2>/dev/null || true; return 1; }
            hidden="yes ($srcdir and $build_dir under empty tmpfs mounts)"
        else
            bash "$script" || { cat "$@" 2>/dev/null || true; return 1; }
        fi
    }
    run_hidden "$moved/run/walk.sh" "$moved/run/train.log" "$moved/run/gen.err" "$moved/run/ck.log" ||
        fail "the installed programs failed from the moved prefix (trees hidden where possible)"
    tail -n 3 "$moved/run/train.log"
    echo "generated: $(head -c 200 "$moved/run/gen.txt")"
    echo "installed programs ran from $moved, without LD_LIBRARY_PATH; trees hidden: $hidden"

    # 5b. moved again: the run resumes, its bundled tokenizer and text found in the new prefix
    moved2=$(mktemp -d /tmp/gptx-moved-again.XXXXXX)
    trap 'rm -rf "$moved" "$moved2"' EXIT
    rmdir "$moved2" && mv "$moved" "$moved2"
    run_hidden "$moved2/run/resume.sh" "$moved2/run/resume.log" ||
        fail "--resume of a run after its prefix moved failed"
    echo "a run of $moved resumed from $moved2: $(grep -m1 "resumed from" "$moved2/run/resume.log")"
fi

# ---- 6. pkg-config from a moved prefix -----------------------------------------
step "pkg-config from a moved prefix"
moved_pc="$work/moved-pc/deeper"
mkdir -p "$(dirname "$moved_pc")"
mv "$prefix" "$moved_pc"
[ ! -e "$prefix" ] || fail "$prefix is still there after the move"
mpcdir="$moved_pc${pcdir#"$prefix"}"
mlibdir="$moved_pc${libdir#"$prefix"}"
for mod in gptx gptx-static; do
    got=$(PKG_CONFIG_PATH="$mpcdir" "$PKG_CONFIG" --variable=prefix "$mod")
    same_file "$got" "$moved_pc" || fail "$mod.pc in the moved prefix says prefix=$got"
    flags=$(PKG_CONFIG_PATH="$mpcdir" "$PKG_CONFIG" --cflags --libs "$mod")
    echo "$mod from the moved prefix: $flags"
    [[ "$flags" != *"$prefix/"* ]] || fail "$mod.pc still names the old prefix: $flags"
done
read -r -a mv_flags <<<"$(PKG_CONFIG_PATH="$mpcdir" "$PKG_CONFIG" --cflags --libs gptx)"
"$CC" -std=c11 -Wall -Wextra -Werror "${extra_flags[@]}" "$src/main.c" -o "$work/app_moved" \
    "${mv_flags[@]}" || fail "building with pkg-config --cflags --libs gptx from the moved prefix failed"
resolved=$(LD_LIBRARY_PATH="$mlibdir" ldd "$work/app_moved" | awk '$1 == "libgptx.so.1" { print $3 }')
same_file "$resolved" "$mlibdir/libgptx.so.1" ||
    fail "app_moved loads libgptx.so.1 from '$resolved', not from $mlibdir"
LD_LIBRARY_PATH="$mlibdir" "$work/app_moved" > /dev/null || fail "app_moved failed"
read -r -a mv_flags <<<"$(PKG_CONFIG_PATH="$mpcdir" "$PKG_CONFIG" --cflags --libs gptx-static)"
"$CC" -std=c11 -Wall -Wextra -Werror "${extra_flags[@]}" "$src/main.c" -o "$work/app_moved_static" \
    "${mv_flags[@]}" -lstdc++ ||
    fail "building with pkg-config --cflags --libs gptx-static from the moved prefix failed"
"$work/app_moved_static" > /dev/null || fail "app_moved_static failed"
mv "$moved_pc" "$prefix"
echo "pkg-config from the moved prefix $moved_pc: gptx and gptx-static build and run"

# ---- 7. the README's consumer snippets, as written ----------------------------------
readme="$here/../../README.md"
snippet() { # <name>: the code block between <!-- consumer: NAME begin/end --> in README.md
    awk -v b="<!-- consumer: $1 begin -->" -v e="<!-- consumer: $1 end -->" \
        '$0 == b { on = 1; next } $0 == e { on = 0 } on && !/^```/' "$readme" |
        sed "s#/opt/gptx#$prefix#g"
}
rd="$work/readme"
if [ -n "${GPTX_DOWNSTREAM_CFLAGS:-}" ]; then
    step "the README's snippets: skipped (a sanitizer build's library needs $GPTX_DOWNSTREAM_CFLAGS)"
else
    step "the README's consumer snippets"
    mkdir -p "$rd/c" "$rd/cxx"
    cp "$src/main.c" "$rd/app.c"
    snippet pkg-config > "$rd/pkgconfig.sh"
    grep -q 'pkg-config --variable=libdir gptx' "$rd/pkgconfig.sh" || fail "README.md: no pkg-config snippet"
    (cd "$rd" && env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH bash -euo pipefail -x pkgconfig.sh) ||
        fail "the README's pkg-config snippet failed as written"
    cp "$src/main.c" "$rd/c/app.c"
    snippet cmake > "$rd/c/CMakeLists.txt"
    grep -q 'find_package(gptx 0.5 ' "$rd/c/CMakeLists.txt" || fail "README.md: no CMake snippet asking for 0.5"
    readme_cmake() { # <dir>: configure (the README's -DCMAKE_PREFIX_PATH), build, run what it built
        "$CMAKE" -S "$1" -B "$1/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
            -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF > "$1/configure.log" 2>&1 &&
            "$CMAKE" --build "$1/b" > "$1/build.log" 2>&1
    }
    readme_cmake "$rd/c" || fail "the README's CMake snippet: $(tail -n 20 "$rd/c/configure.log" "$rd/c/build.log")"
    env -u LD_LIBRARY_PATH "$rd/c/b/app" > /dev/null || fail "the README's CMake app failed"
    echo "README: pkg-config (shared with its rpath, static) and CMake (find_package(gptx 0.5)) build and run"
    # C++, COMPONENTS: the modules this gptx has are found; one it lacks is refused, named
    cp "$src/app.cpp" "$rd/cxx/app.cpp"
    snippet "cmake components" > "$rd/cxx/CMakeLists.txt"
    grep -q 'project(app_cxx CXX)' "$rd/cxx/CMakeLists.txt" || fail "README.md: no C++ components snippet"
    have=()
    for m in cuda mpi; do
        if [ -e "$libdir/libgptx_$m.so" ]; then have+=("$m"); continue; fi
        readme_cmake "$rd/cxx" && fail "COMPONENTS $m succeeded without libgptx_$m.so"
        grep -q "gptx component '$m': libgptx_$m.so is not installed" "$rd/cxx/configure.log" ||
            fail "COMPONENTS $m without the module: $(tail -n 20 "$rd/cxx/configure.log")"
        echo "README C++ snippet as written: refused, naming the missing module ($m)"
        rm -rf "$rd/cxx/b"
    done
    sed -i "s/COMPONENTS cuda mpi/COMPONENTS ${have[*]:-}/" "$rd/cxx/CMakeLists.txt"
    readme_cmake "$rd/cxx" || fail "the README's C++ snippet with COMPONENTS ${have[*]:-(none)}: $(tail -n 20 "$rd/cxx/configure.log" "$rd/cxx/build.log")"
    env -u LD_LIBRARY_PATH "$rd/cxx/b/app_cxx" | grep -q "^app_cxx: gptx ${GPTX_VERSION:-}" ||
        fail "the README's C++ app failed"
    echo "README: a C++ project with COMPONENTS ${have[*]:-(none)} builds and runs"
fi

# find_package's version policy: the ABI promise, one generation (libgptx.so.1, 0.2 on)
step "find_package(gptx VERSION): the versions of this ABI generation"
ask() { # <version or range>: configures components/ asking for it
    rm -rf "$work/version"
    "$CMAKE" -S "$here/components" -B "$work/version" -DCMAKE_PREFIX_PATH="$prefix" \
        -DGPTX_FIND_VERSION="$1" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work/version.log" 2>&1
}
ver=${GPTX_VERSION:-$(sed -n 's/^Version: //p' "$pc")}
next="${ver%%.*}.$(( $(cut -d. -f2 <<< "$ver") + 1 ))"
for v in 0.2 0.5 "$ver" "0.5...<1.0"; do
    ask "$v" || fail "find_package(gptx $v) failed against $ver: $(tail -n 5 "$work/version.log")"
done
for v in 0.1 "$next"; do
    if ask "$v"; then fail "find_package(gptx $v) accepted $ver"; fi
done
echo "find_package(gptx V): 0.2, 0.5, $ver and 0.5...<1.0 found $ver; 0.1 and $next refused"

step "install_downstream: all passed"
