# Sourced by bench/run_cpu_bench.sh and bench/run_generate_bench.sh: what
# they share. Defaults unless already set: BUILD_DIR (<repo>/build-bench),
# THREADS (2), PYTHON (/usr/bin/python3), OUT_DIR (a new temp dir named after
# $1, created). Sets here (bench/) and root (the repository), and gives
# OpenMP, OpenBLAS and MKL the same thread count.
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
root="$(dirname "$here")"
BUILD_DIR="${BUILD_DIR:-$root/build-bench}"
THREADS="${THREADS:-2}"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT_DIR="${OUT_DIR:-$(mktemp -d "/tmp/$1.XXXXXX")}"
mkdir -p "$OUT_DIR"
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
