#!/usr/bin/env bash
# The pool run, device call 1 of 2 (one H200; run from the repository root, .gpu-deps carried):
# build, then leg 1 of the 780 s default from v14 with [tasks] files = the 58 training built-ins +
# the 96 unseen tasks of models/kforge-tiny/rl_tasks.jsonl (pool_manifest.toml: the default with
# that one line changed). Leg 1 ends ~560 s into the call; resume_pool_leg2_and_measure.sh resumes
# it for the rest of 780 s.
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
export OUT=$PWD/build-gpu/out-a
mkdir -p "$OUT" "$final"
{
  sha256sum models/kforge-tiny/model.safetensors models/kforge-tiny/rl_tasks.jsonl bench/data/2026-12-03-pool-run-450s/pool_manifest.toml
  KFORGE_TARGETS=kforge KFORGE_STEPS=none deploy/gpu-host.sh
  secs=$((560 - (SECONDS - start)))
  echo "$secs" >build-gpu/leg1_seconds
  echo "leg 1 for $secs s (started at $((SECONDS - start)) s)"
  KFORGE_REUSE_BUILD=1 KFORGE_TARGETS=kforge KFORGE_STEPS=demorun KFORGE_DEMO_SECONDS=$secs \
    KFORGE_DEMO_MANIFEST=bench/data/2026-12-03-pool-run-450s/pool_manifest.toml deploy/gpu-host.sh
  ls build-gpu/demo/run/checkpoints
} >"$final/call_a.log" 2>&1
cp "$OUT"/demo-run.log "$final/leg1.log"
cp build-gpu/demo/run/summary.json "$final/leg1_summary.json"
tar czf "$final/a_more.tar.gz" -C build-gpu out-a demo/run/train.jsonl demo/run/curriculum.json 2>/dev/null
tail -30 "$final/call_a.log"; tail -5 "$final/leg1.log"
