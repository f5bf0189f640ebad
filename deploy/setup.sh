#!/usr/bin/env bash
# Installs every Debian 12 package kforge needs (idempotent) and builds it in Release into build/.
#   deploy/setup.sh            install + configure + build
#   KFORGE_SKIP_APT=1 ...      skip the package step (already installed)
#   KFORGE_BUILD_DIR=dir ...   build somewhere else
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KFORGE_BUILD_DIR:-$here/build}

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                              # actors (CAF 0.17.6)
  libzmq3-dev cppzmq-dev                  # bus
  libflatbuffers-dev flatbuffers-compiler # messages
  libtorch-dev                            # trainer, policy model (LibTorch 1.13, CPU)
  libboost-dev
  doctest-dev                             # tests
  libtomlplusplus-dev                     # manifest
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libpcre2-dev libseccomp-dev libbenchmark-dev
)

if [[ ${KFORGE_SKIP_APT:-0} != 1 ]]; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
  else
    echo "setup: all ${#packages[@]} packages present"
  fi
fi

# nvcc (CUDA 13) lives in /usr/local/cuda; the sandbox finds it there even if PATH lacks it.
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
echo "setup: built $build/kforge"
