#!/usr/bin/env bash
# modules_hidden.sh <build dir> <work dir>
#
# The core library needs neither CUDA nor MPI (docs/modules.md): installs the
# build into <work dir>/prefix and checks that
#   1. libgptx.so has no NEEDED entry and no RUNPATH for CUDA, cuBLAS(Lt),
#      NCCL or MPI, and libgptx.a references no CUDA or MPI symbol;
#   2. a program linked against the installed core (pkg-config, shared and
#      static: downstream/modules_probe.c) trains on the CPU with the CUDA
#      toolkit and the MPI library hidden (empty tmpfs over the toolkit, the
#      MPI libraries bind-mounted away, in a private mount namespace), and a
#      request for the cuda backend or the MPI engine fails with
#      GPTX_ERR_UNSUPPORTED naming the module and the library it misses;
#   3. with the modules not installed at all, the answer says where it looked;
#   4. with everything visible, the same program loads both modules (the
#      cuda backend then says there is no device, the MPI engine starts);
#   5. the CMake package: find_package(gptx) looks up neither CUDA nor MPI
#      (it configures with both hidden); COMPONENTS cuda mpi finds the
#      installed modules as gptx::cuda and gptx::mpi; a missing component fails.
# Exit 77 where a private mount namespace cannot be made (not root).
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 <gptx build dir> <work dir>" >&2
    exit 2
fi
build_dir=$(cd "$1" && pwd)
work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CMAKE=${CMAKE:-cmake}
CC=${CC:-cc}
fail() { printf 'modules_hidden: FAIL: %s\n' "$*" >&2; exit 1; }

if ! unshare -m --propagation private true 2> /dev/null; then
    echo "SKIPPED: no private mount namespace (unshare -m needs root)"
    exit 77
fi
for m in cuda mpi; do
    [ -f "$build_dir/libgptx_$m.so" ] || { echo "SKIPPED: this build has no $m module"; exit 77; }
done

rm -rf "$work" && mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
"$CMAKE" --install "$build_dir" --prefix "$prefix" > "$work/install.log" || fail "install"
libdir=$(dirname "$(find "$prefix" -name libgptx.so.1 -print -quit)")
for m in cuda mpi; do [ -f "$libdir/libgptx_$m.so" ] || fail "libgptx_$m.so was not installed"; done

# ---- 1. the core's dependencies --------------------------------------------
foreign='cuda|cublas|cudart|nccl|mpi'
deps=$(readelf -d "$libdir/libgptx.so.1" | grep -E 'NEEDED|RUNPATH|RPATH' || true)
echo "$deps"
if grep -qiE "$foreign" <<< "$deps"; then fail "libgptx.so.1 depends on CUDA or MPI"; fi
undef=$(nm -u "$libdir/libgptx.a" 2> /dev/null | grep -E ' (__cuda|cuda|cublas|nccl|MPI_|ompi_)' | sort -u || true)
[ -z "$undef" ] || fail "libgptx.a needs $(echo "$undef" | head -n 3 | tr '\n' ' ')"
echo "ok: libgptx.so.1 and libgptx.a need no CUDA and no MPI"

# ---- 2. a program on the installed core --------------------------------------
export PKG_CONFIG_PATH="$libdir/pkgconfig"
probe_src=$here/downstream/modules_probe.c
# shellcheck disable=SC2046
"$CC" -o "$work/probe" "$probe_src" $(pkg-config --cflags --libs gptx) -Wl,-rpath,"$libdir" ||
    fail "building the probe (shared)"
# shellcheck disable=SC2046
"$CC" -o "$work/probe_static" "$probe_src" $(pkg-config --cflags --libs --static gptx-static) ||
    fail "building the probe (static)"
if readelf -d "$work/probe_static" | grep -qiE "$foreign|libgptx"; then
    fail "the static probe depends on libgptx.so, CUDA or MPI"
fi

# Runs the probe in a private mount namespace where the CUDA toolkit and the
# MPI libraries do not exist.
cuda_root=$(readlink -f "$(dirname "$(readelf -d "$libdir/libgptx_cuda.so" |
    sed -n 's/.*runpath: \[\([^]:]*\).*/\1/p')")")
mpi_libs=$(ls /usr/lib/*/libmpi.so* /usr/lib/*/openmpi/lib/libmpi.so* 2> /dev/null | xargs -r readlink -f | sort -u)
hidden() {
    unshare -m --propagation private bash -c '
        set -e
        mount -t tmpfs none "$1"
        shift
        for f in "$@"; do mount --bind /dev/null "$f"; done
        exec "$PROBE"' _ "$cuda_root" $mpi_libs
}
# A program linked with libgptx.a looks beside itself and in the folder gptx
# was configured to install to (/usr/local/lib here, not this scratch
# prefix): it is told where the modules are.
for kind in probe probe_static; do
    modpath=""
    [ "$kind" = probe_static ] && modpath=$libdir
    out=$(PROBE=$work/$kind GPTX_MODULE_PATH=$modpath hidden) || fail "$kind: the CPU step failed: $out"
    echo "--- $kind, CUDA ($cuda_root) and MPI hidden:"
    echo "$out"
    grep -q '^features: cuda 0 nccl 0 mpi 0' <<< "$out" || fail "$kind: features with nothing loadable"
    grep -q '^cpu: GPTX_OK' <<< "$out" || fail "$kind: CPU step"
    grep -q '^cuda: GPTX_ERR_UNSUPPORTED: .*libgptx_cuda.so could not be loaded: .*libcublasLt' <<< "$out" ||
        fail "$kind: the cuda request does not name the module and cuBLASLt"
    grep -q '^mpi: GPTX_ERR_UNSUPPORTED: .*libgptx_mpi.so could not be loaded: .*libmpi' <<< "$out" ||
        fail "$kind: the MPI request does not name the module and libmpi"
done

# ---- 3. modules not installed ---------------------------------------------------
mkdir -p "$work/away"
mv "$libdir"/libgptx_cuda.so "$libdir"/libgptx_mpi.so "$work/away/"
out=$(GPTX_MODULE_PATH="$work/empty" "$work/probe") || fail "probe without modules: $out"
echo "--- modules not installed:"
echo "$out"
grep -q "^cuda: GPTX_ERR_UNSUPPORTED: .*libgptx_cuda.so is not installed (looked for $work/empty/libgptx_cuda.so, $libdir/libgptx_cuda.so" <<< "$out" ||
    fail "the missing cuda module's message does not say where it looked"
grep -q '^mpi: GPTX_ERR_UNSUPPORTED: .*libgptx_mpi.so is not installed' <<< "$out" ||
    fail "the missing mpi module's message"

# ---- 4. everything visible: both modules load -----------------------------------
mv "$work/away"/* "$libdir/"
out=$(GPTX_MODULE_PATH= OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$work/probe") ||
    fail "probe with modules: $out"
echo "--- modules installed, libraries visible:"
echo "$out"
grep -q '^features: cuda 1 .* mpi 1' <<< "$out" || fail "features with the modules there"
grep -q '^cuda: \(GPTX_OK\|GPTX_ERR_UNSUPPORTED: .*no CUDA device\)' <<< "$out" ||
    fail "the cuda module did not answer for itself"
grep -q '^mpi: GPTX_OK' <<< "$out" || fail "the MPI engine did not start"
# ---- 5. the CMake package's components ---------------------------------------------
comp_src=$here/components
configure() { # NAME [COMPONENTS]: configures components/ into $work/cmake-NAME
    rm -rf "$work/cmake-$1"
    "$CMAKE" -S "$comp_src" -B "$work/cmake-$1" -DCMAKE_PREFIX_PATH="$prefix" \
        -DGPTX_COMPONENTS="${2:-}" > "$work/cmake-$1.log" 2>&1
}
export -f configure
export CMAKE comp_src work prefix
unshare -m --propagation private bash -c '
    set -e
    mount -t tmpfs none "$1"; shift
    for f in "$@"; do mount --bind /dev/null "$f"; done
    configure core' _ "$cuda_root" $mpi_libs || fail "find_package(gptx) failed with CUDA and MPI hidden: $(cat "$work/cmake-core.log")"
grep -q "CUDAToolkit looked up: ;" "$work/cmake-core.log" || fail "find_package(gptx) looked up CUDA"
configure both "cuda;mpi" || fail "COMPONENTS cuda mpi: $(cat "$work/cmake-both.log")"
grep -q "gptx component cuda: $libdir/libgptx_cuda.so" "$work/cmake-both.log" || fail "gptx::cuda"
grep -q "gptx component mpi: $libdir/libgptx_mpi.so" "$work/cmake-both.log" || fail "gptx::mpi"
grep -q "CUDAToolkit looked up: TRUE; MPI looked up: TRUE" "$work/cmake-both.log" ||
    fail "COMPONENTS cuda mpi did not find what the modules need"
mv "$libdir/libgptx_mpi.so" "$work/away/"
if configure nompi "mpi"; then fail "COMPONENTS mpi succeeded without libgptx_mpi.so"; fi
grep -q "gptx_mpi_FOUND\|component\|mpi" "$work/cmake-nompi.log" || fail "no word about the missing component"
mv "$work/away/libgptx_mpi.so" "$libdir/"
echo "ok: find_package(gptx) needs neither CUDA nor MPI; COMPONENTS cuda mpi find the modules"
echo "modules_hidden: all checks passed"
