#!/usr/bin/env bash
# The pool run, device call 2 of 2, on the machine run_pool_leg1.sh left warm: leg 2 (--resume for
# the rest of 780 s), the held-out measure of the last checkpoint (sample seed 0, eval seed 1: one
# set of 8) against v14's recorded measure, and replays of both legs' reward and buffer.
set -u
final=${OUT:-$PWD/gpu-out}
mkdir -p "$final"
[[ -f build-gpu/leg1_seconds && -d build-gpu/demo/run ]] ||
  { echo "call b: no leg 1 on this machine (it was given back): nothing to resume" | tee "$final/call_b.log"; exit 3; }
export OUT=$PWD/build-gpu/out-b
mkdir -p "$OUT"
secs=$((780 - $(cat build-gpu/leg1_seconds)))
run=build-gpu/demo/run
{
  echo "leg 2 for $secs s"
  KFORGE_REUSE_BUILD=1 KFORGE_TARGETS=kforge KFORGE_STEPS=demorun,demoafter KFORGE_DEMO_SECONDS=$secs \
    KFORGE_DEMO_BEFORE=bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz deploy/gpu-host.sh
  ls $run/checkpoints
} >"$final/call_b.log" 2>&1
cp "$OUT"/demo-run.log "$final/leg2.log"
cp "$OUT"/demo-after.log "$final/after.log"
cp "$OUT"/demo_compare.json "$final/demo_compare.json"
cp $run/summary.json "$final/leg2_summary.json"
gzip -c build-gpu/demo/after/verdicts.jsonl >"$final/after_verdicts.jsonl.gz"
{
  for rec in $run/recordings $run/recordings-before-step-*; do
    echo "== replay reward of $rec"
    build-gpu/kforge replay "$rec/verdicts@head.kfrec" --stage reward --manifest $run/manifest.toml; echo "exit $?"
    echo "== replay buffer of $rec"
    build-gpu/kforge replay "$rec/scored@head.kfrec" --stage buffer --manifest $run/manifest.toml; echo "exit $?"
  done
} >"$final/replay.log" 2>&1
tar czf "$final/b_more.tar.gz" -C build-gpu out-b demo/run/train.jsonl demo/run/curriculum.json \
  demo/after/samples/samples.jsonl demo/after/eval_summary.json 2>/dev/null
tail -25 "$final/call_b.log"; grep -E "^==|differ|exit" "$final/replay.log"
