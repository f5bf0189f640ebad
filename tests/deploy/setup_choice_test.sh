#!/usr/bin/env bash
# deploy/setup.sh's choice of build, in its dry run (KFORGE_SETUP_DRY_RUN=1: prints the choice and
# the cmake command, installs and builds nothing), with a fake nvidia-smi, python3 and nvcc first on
# PATH: with a GPU, a CUDA torch and nvcc, the CUDA build for the GPU's architecture against that
# torch's CMake prefix, in deploy/gpu-host.sh's argument order; without a GPU, or with a CPU torch,
# exactly the CPU build's command. Also: KFORGE_DEPS (folder or .tar.xz) as KFORGE_DEPS_DIR, a
# build folder configured the other way gets --fresh, and deploy/lib/configure.sh unpacks an archive.
#   setup_choice_test.sh REPO_ROOT
set -euo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/log" 2>/dev/null; exit 1; }

# fake DIR CAPS TORCH_CUDA: nvidia-smi reporting one GPU per compute capability in CAPS (none:
# nvidia-smi fails, as without a driver), python3 with a torch built for TORCH_CUDA ("None": CPU), nvcc.
fake() {
  local d=$1 caps=$2 tc=$3
  mkdir -p "$d"
  if [[ $caps == none ]]; then
    printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' >"$d/nvidia-smi"
  else
    cat >"$d/nvidia-smi" <<EOF
#!/bin/sh
case "\$1" in
  -L) i=0; for c in $caps; do echo "GPU \$i: NVIDIA Fake (UUID: GPU-\$i)"; i=\$((i+1)); done ;;
  --query-gpu=compute_cap) for c in $caps; do echo "\$c"; done ;;
  *) exit 1 ;;
esac
EOF
  fi
  printf '#!/bin/sh\necho /fake/site-packages/torch/share/cmake\necho %s\n' "$tc" >"$d/python3"
  printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0"\n' >"$d/nvcc"
  chmod +x "$d"/*
}
# setup DIR [VAR=VALUE...]: the dry run with DIR first on PATH, no /dev/nvidia0, build in $work/build.
setup() {
  local d=$1; shift
  env PATH="$d:/usr/bin:/bin" KFORGE_SETUP_DRY_RUN=1 KFORGE_SETUP_NVIDIA_DEV="$work/no-nvidia0" \
    KFORGE_BUILD_DIR="$work/build" "$@" bash "$root/deploy/setup.sh" >"$work/log" 2>&1 || fail "setup.sh $*: exit $?"
}
cmd() { sed -n 's/^setup: would run: //p' "$work/log"; }
cpu_cmd="cmake -S $root -B $work/build -G Ninja -DCMAKE_BUILD_TYPE=Release"
torch=/fake/site-packages/torch/share/cmake

# A Hopper GPU, a CUDA torch, nvcc: the CUDA build for sm_90a, gpu-host.sh's arguments.
fake "$work/h100" 9.0 13.0
setup "$work/h100"
grep -qx "setup: CUDA build for sm_90a with LibTorch at $torch (nvcc $work/h100/nvcc)" "$work/log" || fail "CUDA choice line"
[[ $(cmd) == "$cpu_cmd -DCMAKE_PREFIX_PATH=$torch -DKFORGE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER=$work/h100/nvcc" ]] ||
  fail "CUDA command: $(cmd)"
grep -q "installing\|packages present" "$work/log" && fail "the dry run ran the package step"

# Two Ada GPUs and an Ampere one: each architecture once.
fake "$work/mixed" "8.9 8.9 8.0" 12.8
setup "$work/mixed"
[[ $(cmd) == *" -DCMAKE_CUDA_ARCHITECTURES=80;89 "* ]] || fail "architectures of 8.9 8.9 8.0: $(cmd)"
grep -q "^setup: CUDA build for sm_80, sm_89 " "$work/log" || fail "choice line for two architectures"
# KFORGE_CUDA_ARCHITECTURES wins over nvidia-smi's.
setup "$work/mixed" KFORGE_CUDA_ARCHITECTURES=90a
[[ $(cmd) == *" -DCMAKE_CUDA_ARCHITECTURES=90a "* ]] || fail "KFORGE_CUDA_ARCHITECTURES: $(cmd)"

# No GPU (nvidia-smi fails, no device node): exactly the CPU build's command.
fake "$work/nogpu" none 13.0
setup "$work/nogpu"
grep -qx "setup: CPU build (no NVIDIA GPU found)" "$work/log" || fail "CPU choice line"
[[ $(cmd) == "$cpu_cmd" ]] || fail "CPU command: $(cmd)"
# Nothing on PATH at all but the system's: the CPU build too (CI's machine).
setup "$work/empty"
[[ $(cmd) == "$cpu_cmd" ]] || fail "CPU command without fakes: $(cmd)"

# A GPU but a CPU torch: the CPU build, saying why; KFORGE_CUDA=1 then fails; KFORGE_CUDA=0 forces CPU.
fake "$work/cputorch" 9.0 None
setup "$work/cputorch"
grep -q "^setup: CPU build (NVIDIA GPU found, but no CUDA LibTorch" "$work/log" || fail "CPU torch choice line"
[[ $(cmd) == "$cpu_cmd" ]] || fail "CPU torch command: $(cmd)"
if env PATH="$work/cputorch:/usr/bin:/bin" KFORGE_SETUP_DRY_RUN=1 KFORGE_CUDA=1 KFORGE_BUILD_DIR="$work/build" \
  KFORGE_SETUP_NVIDIA_DEV="$work/no-nvidia0" bash "$root/deploy/setup.sh" >"$work/log" 2>&1; then
  fail "KFORGE_CUDA=1 without a CUDA torch succeeded"
fi
setup "$work/h100" KFORGE_CUDA=0
[[ $(cmd) == "$cpu_cmd" ]] || fail "KFORGE_CUDA=0: $(cmd)"

# The device node alone (nvidia-smi failing) is a GPU too; CMake then asks the driver for its arch.
touch "$work/nvidia0"
setup "$work/nogpu" KFORGE_SETUP_NVIDIA_DEV="$work/nvidia0"
[[ $(cmd) == *" -DKFORGE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native "* ]] || fail "device node only: $(cmd)"

# KFORGE_LIBTORCH: a LibTorch folder with libtorch_cuda is the prefix, over pip's.
mkdir -p "$work/libtorch/lib" && touch "$work/libtorch/lib/libtorch_cuda.so"
setup "$work/h100" KFORGE_LIBTORCH="$work/libtorch"
[[ $(cmd) == *" -DCMAKE_PREFIX_PATH=$work/libtorch -DKFORGE_WITH_CUDA=ON "* ]] || fail "KFORGE_LIBTORCH: $(cmd)"

# A host without package access: KFORGE_DEPS (the folder, or its .tar.xz) first, as gpu-host.sh,
# whose PATH puts /usr/local/cuda/bin first (so its nvcc, where there is one).
mkdir -p "$work/.gpu-deps/bin" "$work/.gpu-deps/lib"
nvcc=$work/h100/nvcc; [[ -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
for d in "$work/.gpu-deps" "$work/.gpu-deps.tar.xz"; do
  setup "$work/h100" KFORGE_DEPS="$d"
  [[ $(cmd) == "$cpu_cmd -DKFORGE_DEPS_DIR=$work/.gpu-deps -DCMAKE_PREFIX_PATH=$torch -DKFORGE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_COMPILER=$nvcc" ]] ||
    fail "KFORGE_DEPS=$d: $(cmd)"
done
# ... and without a GPU: the CPU build against the packed folder and pip's torch.
setup "$work/nogpu" KFORGE_DEPS="$work/.gpu-deps"
[[ $(cmd) == "$cpu_cmd -DKFORGE_DEPS_DIR=$work/.gpu-deps -DCMAKE_PREFIX_PATH=$torch" ]] || fail "KFORGE_DEPS, CPU: $(cmd)"

# A build folder configured as the CPU build starts afresh for the CUDA build, and is reused as is
# for the CPU build.
mkdir -p "$work/build" && printf 'KFORGE_WITH_CUDA:BOOL=OFF\n' >"$work/build/CMakeCache.txt"
setup "$work/h100"
[[ $(cmd) == "cmake --fresh -S "* ]] || fail "CPU cache, CUDA build: $(cmd)"
setup "$work/nogpu"
[[ $(cmd) == "$cpu_cmd" ]] || fail "CPU cache, CPU build: $(cmd)"
printf 'KFORGE_WITH_CUDA:BOOL=ON\nCMAKE_PREFIX_PATH:UNINITIALIZED=%s\n' "$torch" >"$work/build/CMakeCache.txt"
setup "$work/h100"
[[ $(cmd) == "cmake -S "* ]] || fail "CUDA cache, same CUDA build: $(cmd)"
setup "$work/nogpu"
[[ $(cmd) == "cmake --fresh ${cpu_cmd#cmake }" ]] || fail "CUDA cache, CPU build: $(cmd)"
rm -rf "$work/build"

# deploy/lib/configure.sh unpacks DEPS.tar.xz into DEPS, and refuses an archive of another folder.
mkdir -p "$work/pack/.gpu-deps/lib" && touch "$work/pack/.gpu-deps/lib/libx.so.1"
mkdir -p "$work/u" && tar cJf "$work/u/.gpu-deps.tar.xz" -C "$work/pack" .gpu-deps
( . "$root/deploy/lib/configure.sh" && kforge_unpack_deps "$work/u/.gpu-deps" test ) || fail "unpack"
[[ -f $work/u/.gpu-deps/lib/libx.so.1 && ! -e $work/u/.gpu-deps.unpack ]] || fail "unpacked folder"
mkdir -p "$work/bad" && tar cJf "$work/bad/.gpu-deps.tar.xz" -C "$work/pack/.gpu-deps" lib
if ( . "$root/deploy/lib/configure.sh" && kforge_unpack_deps "$work/bad/.gpu-deps" test ) 2>"$work/log"; then
  fail "an archive of another folder unpacked"
fi
grep -q "does not unpack into .gpu-deps/" "$work/log" || fail "no message for the wrong archive"
echo "setup choice: all cases passed"
