# shellcheck shell=bash
# Sourced by deploy/setup.sh and deploy/gpu-host.sh: the CUDA build's configure step and the packed
# dependency folder (deploy/pack-deps.sh) of a host without package access. Defines functions only;
# works with or without `set -e`.

# kforge_unpack_deps DEPS WHO: unpacks DEPS.tar.xz (made by `tar cJf DEPS.tar.xz DEPS`, from DEPS's
# parent) into DEPS when the folder is missing or older than the archive (a warm machine keeps the
# last call's), into a temporary folder first, so a failed unpack leaves no half folder. Without an
# archive it does nothing. Returns 2, with a message prefixed "WHO: ", when the archive does not
# unpack into a folder named like DEPS.
kforge_unpack_deps() {
  local deps=$1 who=$2
  if [[ -f $deps.tar.xz && ( ! -d $deps || $deps.tar.xz -nt $deps ) ]]; then
    rm -rf "$deps.unpack" && mkdir -p "$deps.unpack" && tar xJf "$deps.tar.xz" -C "$deps.unpack" &&
      [[ -d $deps.unpack/$(basename "$deps") ]] && rm -rf "$deps" &&
      mv "$deps.unpack/$(basename "$deps")" "$deps" && touch "$deps" && rm -rf "$deps.unpack" ||
      { echo "$who: $deps.tar.xz does not unpack into $(basename "$deps")/" >&2; return 2; }
  fi
  return 0
}

# kforge_deps_env DEPS: the packed flatc and CUDA's tools first on PATH, the packed libraries on
# LD_LIBRARY_PATH (the built binaries load them from there at run time).
kforge_deps_env() {
  export PATH=$1/bin:/usr/local/cuda/bin:$PATH
  export LD_LIBRARY_PATH=$1/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# kforge_cuda_configure_args DEPS TORCH_PREFIX ARCHS NVCC: prints, one a line, the CMake arguments
# after `-S SRC -B BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release` of the CUDA build: DEPS (may be empty:
# the libraries are then the system's) as KFORGE_DEPS_DIR, a CUDA LibTorch's CMake prefix, the
# device code's CUDA architectures (e.g. 90a) and the CUDA compiler.
kforge_cuda_configure_args() {
  [[ -n $1 ]] && echo "-DKFORGE_DEPS_DIR=$1"
  printf '%s\n' "-DCMAKE_PREFIX_PATH=$2" -DKFORGE_WITH_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$3" \
    "-DCMAKE_CUDA_COMPILER=$4"
}
