#!/usr/bin/env bash
# Run on the development machine (Debian, network) before a GPU session:
# downloads the .deb files of gptx's build dependencies that the GPU machine's
# image may lack (OpenBLAS, jansson, PCRE2, pkg-config) into build-gpu-deps/
# (ignored by git through /build*/). The GPU session carries that folder
# (device `run` with carry: ["build-gpu-deps"]); tests/gpu/run_all.sh unpacks
# it into a private prefix when the machine has no such packages of its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dest=build-gpu-deps
mkdir -p "$dest"
cd "$dest"
pkgs=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
      libquadmath0 libjansson-dev libjansson4 libpcre2-dev libpcre2-8-0 libpcre2-16-0
      libpcre2-32-0 libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)
apt-get download "${pkgs[@]}"
ls -la
du -sh .
