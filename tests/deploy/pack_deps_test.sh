#!/usr/bin/env bash
# deploy/pack-deps.sh refuses a build directory where a library CMake found is linked by no built
# file (only some targets built): the GPU host's configure step would fail on it after its machine
# was started. A build whose found libraries are all packed passes.
# Usage: pack_deps_test.sh SOURCE_DIR
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lib=$(ldconfig -p | awk '$1 == "libz.so.1" && /x86-64/ {print $NF; exit}')
[[ -n $lib ]] || { echo "skipped: no libz.so.1 known to ldconfig"; exit 77; }
mkdir -p "$work/build/bin"
echo '[]' >"$work/build/compile_commands.json"
echo "zlib_z_LIBRARY:FILEPATH=$lib" >"$work/build/CMakeCache.txt"
# 1. Nothing built links it: refused, naming it and what to do.
out=$("$src/deploy/pack-deps.sh" "$work/build" "$work/deps1" 2>&1)
rc=$?
if [[ $rc -ne 1 || $out != *"$(basename "$lib"): found by CMake but linked by no file built"* ]]; then
  echo "FAILED: a library linked by nothing built was not refused (rc $rc): $out"; exit 1
fi
# 2. A built file links it (a copy of a program that needs it, or any file naming it as NEEDED):
#    packed, and the run passes.
prog=$(for f in /usr/bin/* /usr/sbin/*; do
  readelf -d "$f" 2>/dev/null | grep -q "NEEDED.*\[libz.so.1\]" && { echo "$f"; break; }
done)
[[ -n $prog ]] || { echo "skipped: no program here links libz.so.1"; exit 77; }
cp "$prog" "$work/build/bin/"
out=$("$src/deploy/pack-deps.sh" "$work/build" "$work/deps2" 2>&1)
rc=$?
if [[ $rc -ne 0 || ! -e $work/deps2/lib/libz.so.1 ]]; then
  echo "FAILED: a linked library was not packed (rc $rc): $out"; exit 1
fi
echo "ok"
