#!/usr/bin/env bash
# Run on the development machine (Debian, network) before a GPU session:
# downloads the .deb files of gptx's build dependencies that the GPU machine's
# image may lack into build-gpu-deps/ (ignored by git through /build*/). The
# GPU session carries that folder (device `run` with carry: ["build-gpu-deps"]);
# tests/gpu/run_all.sh unpacks it into a private prefix when the machine has no
# such packages of its own.
#   build-gpu-deps/*.deb       OpenBLAS, jansson, PCRE2, pkg-config: the build
#   build-gpu-deps/dnnl/*.deb  oneDNN 2.6 (libdnnl2, libdnnl-dev) for the CPU
#                              backend's bf16 policy, which test_cuda_model
#                              compares the CUDA bf16 policy with; and what
#                              libdnnl.so.2.6 loads that a bare image may lack:
#                              libOpenCL.so.1 (ocl-icd-libopencl1) and libgomp.so.1
#                              (libgomp1), unpacked only where the loader has none
# NCCL is not here: the image has it as python3's wheel nvidia-nccl-cu13
# (run_all.sh finds nccl.h and libnccl.so.2 in site-packages/nvidia/nccl).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dest=build-gpu-deps
mkdir -p "$dest/dnnl"
pkgs=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
      libquadmath0 libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 libpcre2-16-0
      libpcre2-32-0 libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)
dnnl=(libdnnl2 libdnnl-dev ocl-icd-libopencl1 libgomp1)
(cd "$dest" && apt-get download "${pkgs[@]}")
(cd "$dest/dnnl" && apt-get download "${dnnl[@]}")
ls -la "$dest" "$dest/dnnl"
du -sh "$dest" "$dest/dnnl"
