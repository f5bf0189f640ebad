#!/usr/bin/env bash
# deploy/pack-deps.sh BUILD_DIR OUT_DIR
#
# Packs what a host without package access (the GPU host: Ubuntu, no apt, no network) lacks to
# build and run kforge: the headers kforge's own translation units include from Debian -dev
# packages (the exact include closure, read from BUILD_DIR/compile_commands.json), the shared
# libraries the built binaries link from Debian packages (their ldd closure, each with its link
# name, e.g. libseccomp.so, for -l), and flatc. LibTorch, CUDA, NCCL, glibc and libstdc++ are left
# out: that host has its own.
#
# Run it on a Debian machine where deploy/setup.sh has built BUILD_DIR (kforge's CMakeLists.txt
# always writes compile_commands.json), e.g.
#   deploy/pack-deps.sh build .gpu-deps && tar cJf .gpu-deps.tar.xz .gpu-deps   # ~15 MB, ~3.5 MB
# On the other host, deploy/setup.sh with KFORGE_DEPS=.gpu-deps (or .gpu-deps.tar.xz), or
# deploy/gpu-host.sh, passes OUT_DIR to CMake as KFORGE_DEPS_DIR (include/, lib/ and bin/ searched
# first), prepends OUT_DIR/bin to PATH and OUT_DIR/lib to LD_LIBRARY_PATH.
set -euo pipefail
build=${1:?usage: pack-deps.sh BUILD_DIR OUT_DIR}
out=${2:?usage: pack-deps.sh BUILD_DIR OUT_DIR}
db=$build/compile_commands.json
[[ -f $db ]] || { echo "pack-deps: $db missing: configure and build $build first (deploy/setup.sh)" >&2; exit 2; }
mkdir -p "$out/include" "$out/lib" "$out/bin"

# Packages whose files the other host already has in its own versions.
skip='^(libc6-dev|linux-libc-dev|libstdc\+\+-[0-9]+-dev|libgcc-[0-9]+-dev|libtorch-dev|libtorch[0-9.]*|python3-torch|libc10[0-9.]*|libcaffe2.*|libprotobuf-dev|libgomp[0-9]*|libc6|libstdc\+\+6|libgcc-s1)(:amd64)?$'

# 1. Header closure of every C++ translation unit (CUDA ones are compiled on the other host anyway):
#    each one's compile command with -M -MG instead of -c/-o, run on all cores.
python3 - "$db" > "$out/.tu.sh" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if not f.endswith((".cpp", ".cc", ".cxx")):
        continue
    args = e.get("arguments") or shlex.split(e["command"])
    keep, skip_next = [], False
    for a in args[1:]:
        if skip_next: skip_next = False; continue
        if a in ("-o", "-c"): skip_next = a == "-o"; continue
        if a.startswith("-o"): continue
        keep.append(a)
    print("cd %s && %s -M -MG %s" % (shlex.quote(e["directory"]), shlex.quote(args[0]), " ".join(map(shlex.quote, keep))))
PY
xargs -d '\n' -P "$(nproc)" -I{} bash -c {} < "$out/.tu.sh" 2>/dev/null | tr ' \\' '\n\n' |
  grep '^/usr/include/' | sort -u > "$out/.headers" || true
# One dpkg query for all of them: "package: /path" lines.
n=0
if [[ -s $out/.headers ]]; then
  xargs dpkg -S < "$out/.headers" 2>/dev/null | sed 's/:amd64//' | while IFS=': ' read -r pkg h; do
    [[ $pkg =~ $skip ]] && continue
    rel=${h#/usr/include/}; mkdir -p "$out/include/$(dirname "$rel")"; cp -L "$h" "$out/include/$rel"
  done || true
  n=$(find "$out/include" -type f | wc -l)
fi
# Some headers include siblings only through macros -M can't see; take whole small library folders.
for d in caf flatbuffers doctest; do [[ -d /usr/include/$d ]] && cp -rL /usr/include/$d "$out/include/"; done

# 2. Shared libraries: what the built files link directly (minus LibTorch, CUDA, NCCL and the C/C++
#    runtime, which the other host has), plus everything those libraries need in turn.
libpath() { ldconfig -p | awk -v n="$1" '$1 == n && /x86-64/ {print $NF; exit}'; }
for f in $(find "$build" -type f \( -perm -u+x -o -name '*.so*' \) -not -path '*/CMakeFiles/*' 2>/dev/null); do
  readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
done | sort -u | grep -Ev '^(libtorch|libc10|libcaffe2|libcud|libnccl|libnv|libc\.|libm\.|libstdc|libgcc_s|libpthread|libdl|librt|ld-linux)' > "$out/.libs" || true
while read -r name; do
  lib=$(libpath "$name"); [[ -n $lib ]] || { echo "pack-deps: $name not found by ldconfig" >&2; continue; }
  { echo "$lib"; ldd "$lib" 2>/dev/null | awk '/=> \//{print $3}'; }
done < "$out/.libs" | sort -u | while read -r lib; do
  base=$(basename "$lib")
  [[ $base =~ ^(libc\.|libm\.|libstdc|libgcc_s|libpthread|libdl|librt|ld-linux|libresolv) ]] && continue
  cp -L "$lib" "$out/lib/$base"
  ln -sf "$base" "$out/lib/${base%%.so*}.so" 2>/dev/null || true   # link name, for -l
done || true

# 3. flatc, which the build runs to generate the message headers.
if command -v flatc >/dev/null; then cp "$(command -v flatc)" "$out/bin/"
else echo "pack-deps: no flatc on PATH (Debian: flatbuffers-compiler): $out/bin has none" >&2; fi
rm -f "$out/.tu.sh" "$out/.headers" "$out/.libs"
# Every library CMake found for kforge (cmake/deps.cmake's kforge_dep: NAME_LIB_LIBRARY in the cache)
# must be packed. One is missing when no built file links it yet (only some targets built): the
# other host's configure step would then fail on it, after its machine was started for nothing.
missing=()
while IFS= read -r lib; do
  [[ -e $out/lib/$(basename "$lib") ]] || missing+=("$(basename "$lib")")
done < <(sed -n 's/^[a-z0-9]*_.*_LIBRARY:FILEPATH=\(\/.*\)$/\1/p' "$build/CMakeCache.txt" 2>/dev/null)
if ((${#missing[@]})); then
  echo "pack-deps: ${missing[*]}: found by CMake but linked by no file built in $build; build every target first (cmake --build $build)" >&2
  exit 1
fi
echo "pack-deps: $n headers from the include closure, $(ls "$out/lib" | wc -l) library files, $(du -sh "$out" | cut -f1) in $out"
