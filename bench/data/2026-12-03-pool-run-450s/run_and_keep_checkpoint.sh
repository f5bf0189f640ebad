#!/usr/bin/env bash
# One self-contained device call (no leg to resume, so nothing is lost when the machine is given
# back between calls). Build, then the default with the unseen pool (pool_manifest.toml) for
# KFORGE_RUN_SECONDS (default 450), no resume. The last checkpoint comes back in bf16
# (ckpt_model.safetensors, 15 MB, cast by LibTorch as the GPU sampler's load casts it, so sampling
# is unchanged) with its small files (ckpt_small.tar.gz; optimizer.pt stays), so that
# measure_carried_checkpoint.sh can measure it on any machine: carried as .carried-ckpt/step-N with
# .gpu-deps.tar.xz it fits 64 MiB. (The 2026-12-03 pool run's call brought back the fp32 file in
# parts, ckpt.tar.part-*.)
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
export OUT=$PWD/build-gpu/out-d
mkdir -p "$OUT" "$final"
secs=${KFORGE_RUN_SECONDS:-450}
# KFORGE_MANIFEST: the manifest run (default pool_manifest.toml; set empty for the embedded default,
# which has the same task files)
manifest=${KFORGE_MANIFEST-bench/data/2026-12-03-pool-run-450s/pool_manifest.toml}
{
  sha256sum models/kforge-tiny/model.safetensors models/kforge-tiny/rl_tasks.jsonl ${manifest:-pipeline/default_manifest.toml}
  echo "run ${manifest:-the embedded default} for $secs s"
  KFORGE_TARGETS=kforge KFORGE_STEPS=demorun KFORGE_DEMO_SECONDS=$secs \
    KFORGE_DEMO_MANIFEST=$manifest deploy/gpu-host.sh
  ls build-gpu/demo/run/checkpoints
} >"$final/call_d.log" 2>&1
last= n=-1  # the newest complete checkpoint (gpu-host.sh's demo_checkpoint)
for d in build-gpu/demo/run/checkpoints/step-*; do
  i=${d##*/step-}
  [[ $i =~ ^[0-9]+$ && -f $d/model.safetensors && -f $d/trainer_state.json ]] && ((i > n)) && { n=$i; last=$d; }
done
echo "checkpoint: $last" >>"$final/call_d.log"
if [[ -n $last ]]; then
  python3 - "$last/model.safetensors" "$final/ckpt_model.safetensors" <<'PY'
import sys, torch
from safetensors.torch import load_file, save_file
t = load_file(sys.argv[1])
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}, sys.argv[2], metadata={"format": "pt"})
PY
  tar czf "$final/ckpt_small.tar.gz" -C "$(dirname "$last")" --exclude optimizer.pt --exclude model.safetensors \
    --exclude tokenizer.json "$(basename "$last")"
fi
# Every verdict's task, status and reason (no sources: the recording itself is too large to bring
# back; a status left out is ok, the schema default). kforge inspect stops at a reason that is not
# valid UTF-8, so the file may end early; infra_error reasons are also in the run's infra_errors.jsonl.
# (gpu-host.sh sets the library path for its own steps only: without it kforge does not start here
# and this file comes back empty.)
export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")/lib
build-gpu/kforge inspect build-gpu/demo/run/recordings/verdicts@head.kfrec 2>"$final/inspect.err" | python3 -c '
import json, sys
for line in sys.stdin:
    p = json.loads(line)["envelope"]["payload"]
    print(json.dumps({"task": p["candidate"]["task"]["id"], "status": p.get("status", "ok"), "reason": p.get("reason", "")}))
' | gzip >"$final/verdict_reasons.jsonl.gz"
cp "$OUT"/demo-run.log "$final/run.log"
cp build-gpu/demo/run/summary.json "$final/run_summary.json"
tar czf "$final/d_more.tar.gz" -C build-gpu out-d demo/run/train.jsonl demo/run/curriculum.json demo/run/infra_errors.jsonl 2>/dev/null
infra=build-gpu/demo/run/infra_errors.jsonl  # grep -c prints 0 where none match
echo "infra_error verdicts: $(cat $infra 2>/dev/null | grep -c .), of them CUDA out of memory:" \
  "$(cat $infra 2>/dev/null | grep -ci 'out of memory')" >>"$final/call_d.log"
tail -12 "$final/call_d.log"; echo "call d took $((SECONDS - start)) s"
