#!/usr/bin/env bash
# Installs every Debian 12 package kforge needs (idempotent) and builds it in Release into build/.
# On a machine with an NVIDIA GPU (`nvidia-smi -L` works, or /dev/nvidia0 exists), a CUDA LibTorch
# (pip's torch with torch.version.cuda set, or KFORGE_LIBTORCH) and nvcc, the build is the CUDA
# build (device code and GPU tests, for the GPU's architecture, configured as deploy/gpu-host.sh
# does); otherwise the CPU build. One line it prints says which, and why.
#   deploy/setup.sh                  install + configure + build
#   KFORGE_SKIP_APT=1 ...            skip the package step (already installed)
#   KFORGE_BUILD_DIR=dir ...         build somewhere else
#   KFORGE_DEPS=dir|dir.tar.xz ...   a host without package access: no package step; the libraries,
#                                    headers and flatc from deploy/pack-deps.sh (an archive is
#                                    unpacked next to itself) as KFORGE_DEPS_DIR
#   KFORGE_LIBTORCH=dir ...          this LibTorch (its CMake prefix) instead of pip's torch
#   KFORGE_CUDA=0|1 ...              force the CPU build / fail unless the CUDA build is possible
#   KFORGE_CUDA_ARCHITECTURES=90a    instead of the GPUs' own (nvidia-smi's compute_cap)
#   KFORGE_NVCC=path ...             instead of nvcc on PATH, then /usr/local/cuda/bin/nvcc
#   KFORGE_SETUP_DRY_RUN=1 ...       print the choice and the cmake command; install and build nothing
#   KFORGE_TARGETS="kforge" ...      build only these targets (space-separated), not the tests and benches
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${KFORGE_BUILD_DIR:-$here/build}
dry=${KFORGE_SETUP_DRY_RUN:-0}
. "$here/deploy/lib/configure.sh"

# A host without package access: the packed folder (or its .tar.xz) instead of Debian's packages.
deps=
if [[ -n ${KFORGE_DEPS:-} ]]; then
  deps=${KFORGE_DEPS%.tar.xz}
  [[ -d $(dirname "$deps") ]] || { echo "setup: KFORGE_DEPS=$KFORGE_DEPS: no such folder" >&2; exit 2; }
  deps=$(cd "$(dirname "$deps")" && pwd)/$(basename "$deps")
  if [[ $dry != 1 ]]; then
    kforge_unpack_deps "$deps" setup || exit 2
    [[ -d $deps ]] || { echo "setup: $deps missing: make it with deploy/pack-deps.sh" >&2; exit 2; }
  fi
  kforge_deps_env "$deps"
fi

packages=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev                              # actors (CAF 0.17.6)
  libzmq3-dev cppzmq-dev                  # bus
  libflatbuffers-dev flatbuffers-compiler # messages
  libtorch-dev                            # trainer, policy model (LibTorch 1.13, CPU)
  doctest-dev                             # tests
  libtomlplusplus-dev                     # manifest
  nlohmann-json3-dev libcli11-dev         # settings, flags
  libfmt-dev libspdlog-dev                # log lines (common/log.hpp)
  libpcre2-dev                            # tokenizer's pre-split
  libseccomp-dev                          # the candidate child's seccomp filter
  libcpp-httplib-dev                      # the openai sampler backend, kforge serve
  python3-torch                           # kforge tasks import-kernelbench (PyTorch problem files)
  slurm-wlm munge                         # a one-host Slurm for tests/deploy/slurm_launch_test.sh
  iproute2                                # ip, tc: namespace hosts for tests/deploy/netns_faults_test.sh
)

if [[ ${KFORGE_SKIP_APT:-0} != 1 && -z $deps && $dry != 1 ]]; then
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

# The CUDA build's three needs: an NVIDIA GPU (its architectures), a CUDA LibTorch, nvcc.
# KFORGE_SETUP_NVIDIA_DEV stands in for /dev/nvidia0 in tests/deploy/setup_choice_test.sh.
gpu=0 archs='' torch_prefix='' torch_cuda='' nvcc='' why=''
if nvidia-smi -L >/dev/null 2>&1 || [[ -e ${KFORGE_SETUP_NVIDIA_DEV:-/dev/nvidia0} ]]; then
  gpu=1
  # compute_cap 9.0 -> 90a (Hopper's arch-specific features, as deploy/gpu-host.sh), 8.9 -> 89.
  archs=${KFORGE_CUDA_ARCHITECTURES:-$( (nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true) |
    tr -d ' .' | { grep -E '^[0-9]+$' || true; } | sed 's/^90$/90a/' | sort -u | paste -sd';')}
  archs=${archs:-native}  # a GPU nvidia-smi did not describe: CMake asks the driver
fi
if [[ -n ${KFORGE_LIBTORCH:-} ]]; then
  [[ -d $KFORGE_LIBTORCH ]] || { echo "setup: KFORGE_LIBTORCH=$KFORGE_LIBTORCH: no such folder" >&2; exit 2; }
  torch_prefix=$(cd "$KFORGE_LIBTORCH" && pwd)
  compgen -G "$torch_prefix/lib/libtorch_cuda.*" >/dev/null && torch_cuda=1
elif [[ $gpu == 1 || -n $deps ]]; then
  # pip's torch: its CMake prefix, and the CUDA version it was built with ("None" for a CPU torch).
  torch_info=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.version.cuda)" 2>/dev/null || true)
  torch_prefix=$(sed -n 1p <<<"$torch_info")
  [[ -n $torch_prefix && $(sed -n 2p <<<"$torch_info") != None ]] && torch_cuda=1
fi
nvcc=${KFORGE_NVCC:-$(command -v nvcc || true)}
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ ${KFORGE_CUDA:-} == 0 ]]; then why="KFORGE_CUDA=0"
elif [[ $gpu != 1 ]]; then why="no NVIDIA GPU found"
elif [[ -z $torch_cuda ]]; then
  why="NVIDIA GPU found, but no CUDA LibTorch: pip install torch, or set KFORGE_LIBTORCH=/path/to/libtorch"
elif [[ -z $nvcc || ! -x $nvcc ]]; then
  why="NVIDIA GPU found, but no nvcc: install the CUDA toolkit (/usr/local/cuda) or set KFORGE_NVCC"
fi
[[ -n $why && ${KFORGE_CUDA:-} == 1 ]] && { echo "setup: KFORGE_CUDA=1, but $why" >&2; exit 2; }

args=(-S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -z $why ]]; then
  cuda=ON
  mapfile -t more < <(kforge_cuda_configure_args "$deps" "$torch_prefix" "$archs" "$nvcc")
  args+=("${more[@]}")
  PATH=$(dirname "$nvcc"):$PATH  # LibTorch's CMake files look for the CUDA toolkit there too
  for_arch="sm_${archs//;/, sm_}"; [[ $archs == native ]] && for_arch="the GPU's own architecture"
  echo "setup: CUDA build for $for_arch with LibTorch at $torch_prefix (nvcc $nvcc)"
else
  cuda=OFF
  # Without a packed folder: exactly the Debian machine's CPU build (Debian's LibTorch 1.13).
  if [[ -n $deps ]]; then
    args+=("-DKFORGE_DEPS_DIR=$deps")
    [[ -n $torch_prefix ]] && args+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
  fi
  echo "setup: CPU build ($why)"
fi
# A build folder configured the other way (or against another LibTorch) starts from a fresh cache:
# a cached Torch_DIR would otherwise keep the old LibTorch.
if [[ -f $build/CMakeCache.txt ]]; then
  old_cuda=$(sed -n 's/^KFORGE_WITH_CUDA:BOOL=//p' "$build/CMakeCache.txt")
  old_prefix=$(sed -n 's/^CMAKE_PREFIX_PATH:[A-Z]*=//p' "$build/CMakeCache.txt")
  want_prefix=; [[ -n $torch_prefix && ( $cuda == ON || -n $deps ) ]] && want_prefix=$torch_prefix
  if [[ ${old_cuda:-OFF} != "$cuda" || $old_prefix != "$want_prefix" ]]; then
    args=(--fresh "${args[@]}")
  fi
fi
if [[ $dry == 1 ]]; then
  echo "setup: would run: cmake ${args[*]}"
  exit 0
fi
# nvcc (CUDA 13) lives in /usr/local/cuda; the sandbox finds it there even if PATH lacks it.
cmake "${args[@]}"
cmake --build "$build" -j "$(nproc)" ${KFORGE_TARGETS:+--target $KFORGE_TARGETS}
echo "setup: built ${KFORGE_TARGETS:-every target} in $build"
