#!/usr/bin/env bash
# bench/kernelbench_compile.sh refuses parallel warmers for a mode that autotunes (their compile
# times kernels on the GPU, and parallel warmers would time them against each other), before it
# starts any Python; without --warmers such a mode warms with one process; the measuring pass is
# given the warming passes' lines (--warmed), so it measures what warmed first. No GPU or torch
# needed: a fake python records how it was called and writes an ok line where a pass writes its own.
# Usage: kernelbench_compile_args_test.sh SOURCE_DIR
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo '{"id": "t"}' >"$work/tasks.jsonl"
cat >"$work/python" <<'PY'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/calls"
while [[ $# -gt 1 ]]; do [[ $1 == --out ]] && echo '{"id": "t", "ok": true}' >"$2"; shift; done
PY
chmod +x "$work/python"
run() { KFORGE_PYTHON=$work/python "$src/bench/kernelbench_compile.sh" "$work/tasks.jsonl" "$work/out.jsonl" "$@" 2>&1; }
out=$(run --mode max-autotune --warmers 12)
rc=$?
if [[ $rc -ne 2 || $out != *"use --warmers 1"* || -e $work/calls ]]; then
  echo "FAILED: --mode max-autotune --warmers 12 was not refused before running (rc $rc): $out"; exit 1
fi
out=$(run --warmers 0)
if [[ $? -ne 2 || $out != *"a count of 1 or more"* ]]; then echo "FAILED: --warmers 0 accepted: $out"; exit 1; fi
# Without --warmers: one warming process for max-autotune (then the measuring one), six for default.
run --mode max-autotune >/dev/null || { echo "FAILED: --mode max-autotune alone did not run"; exit 1; }
n=$(grep -c -- "--trials 1" "$work/calls")
[[ $n -eq 1 ]] || { echo "FAILED: max-autotune warmed with $n processes, not 1"; exit 1; }
rm "$work/calls"
run >/dev/null || { echo "FAILED: the default mode did not run"; exit 1; }
n=$(grep -c -- "--trials 1" "$work/calls")
# split -n r/6 of a one-line file makes 6 shards, 5 of them empty: each still gets a warmer.
[[ $n -eq 6 ]] || { echo "FAILED: the default mode warmed with $n processes, not 6"; exit 1; }
measure=$(grep -v -- "--trials 1" "$work/calls")
w=$(grep -o -- "--warmed .*" <<<"$measure" | grep -o "shard\.[0-9]*\.warm\.jsonl" | wc -l)
[[ $w -eq 6 ]] || { echo "FAILED: the measuring pass was given $w warming files, not 6: $measure"; exit 1; }
echo "all checks passed"
