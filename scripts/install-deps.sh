#!/usr/bin/env bash
# Installs the Debian packages gptx needs to build and test. Runs apt-get as
# root, through sudo when started by another user.
set -euo pipefail
as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends \
  cmake make gcc g++ clang libclang-rt-14-dev pkg-config file binutils ca-certificates \
  libopenblas-dev abigail-tools libjansson-dev libpcre2-dev libdnnl-dev \
  openmpi-bin libopenmpi-dev python3 python3-venv >/dev/null
echo "install-deps.sh: build dependencies installed"
