#!/usr/bin/env bash
# The same run in sync and in async mode on one host: wall time per step and each GPU
# group's idle fraction, from the two runs' summary.json (kforge run writes seconds_per_step and
# gpu_groups; README "Idle GPU groups" says how they are measured). Goal: async <= 0.6x sync in
# seconds per step when rollout and training take similar time.
#
#   bench/loop_modes.sh --model DIR [--manifest FILE] [--kforge BIN] [--steps N] [--work DIR]
#                       [--set TABLE.KEY=VALUE]... [--json OUT]
#   bench/loop_modes.sh --cpu-smoke [--kforge BIN] [--steps N] [--json OUT]
#
# --manifest defaults to deploy/manifests/gpu_loop.toml, whose @MODEL@ becomes --model DIR (a
# checkpoint such as deploy/make_random_model.py writes). The [run] mode is set with sed on a copy,
# once "sync", once "async"; nothing else differs. --set changes one key in both copies (VALUE is
# TOML: quote strings), e.g. --set sampler.max_new_tokens=24 to bring rollout time near training
# time. Async gains only where rollout and training run on different GPUs: on a 1-GPU host both
# "auto" groups share GPU 0 and contend. Few steps understate the gain (the first step cannot
# overlap): use 10 or more.
#
# --cpu-smoke runs here without a GPU: the tiny fixture Qwen2 (tests/model/fixtures), a one-line
# prompt, the nvcc sandbox compile-only, CPU-only groups. It checks the script and the summary
# fields; its trainer step is tiny next to generation, so its ratio says little about the goal.
#
# Exit status: 0 when both runs completed (whether or not the goal is met), 1 otherwise, 2 on bad
# arguments.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kforge=${KFORGE_BIN:-$root/build/kforge}
manifest=$root/deploy/manifests/gpu_loop.toml
model="" steps="" json="" work="" smoke=0
sets=()

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --model) model=${2:-}; shift 2 ;;
    --manifest) manifest=${2:-}; shift 2 ;;
    --kforge) kforge=${2:-}; shift 2 ;;
    --steps) steps=${2:-}; shift 2 ;;
    --work) work=${2:-}; shift 2 ;;
    --json) json=${2:-}; shift 2 ;;
    --set) sets+=("${2:-}"); shift 2 ;;
    --cpu-smoke) smoke=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "loop_modes: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -x $kforge ]] || { echo "loop_modes: no kforge binary at $kforge (--kforge BIN)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "loop_modes: needs python3 to read summary.json" >&2; exit 2; }
if ((!smoke)); then
  [[ -f $manifest ]] || { echo "loop_modes: no manifest $manifest" >&2; exit 2; }
  if grep -q '@MODEL@' "$manifest"; then
    [[ -n $model ]] || { echo "loop_modes: $manifest needs --model DIR (for @MODEL@)" >&2; exit 2; }
    [[ -d $model ]] || { echo "loop_modes: --model $model is not a directory" >&2; exit 2; }
  fi
fi
work=${work:-$(mktemp -d "${TMPDIR:-/tmp}/kf-loopmodes.XXXXXX")}
mkdir -p "$work"
base=$work/base.toml

if ((smoke)); then
  # The fixture model and its tokenizer in one directory, as the engine sampler reads it.
  mkdir -p "$work/model"
  cp "$root"/tests/model/fixtures/qwen2/* "$root"/tests/model/fixtures/tokenizer/* "$work/model/"
  cat >"$base" <<EOF
# loop_modes.sh --cpu-smoke: the whole loop on the CPU with the tiny fixture model.
[run]
name = "loopmodes-smoke"
mode = "sync"
steps = 10
seed = 1
progress = false

[gpu_groups]
rollout = []
trainer = []

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sampler        = { count = 1, gpu_group = "rollout" }
sandbox_pool   = { count = 1 }
sandbox_worker = { count = 1, gpu_group = "rollout" }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1, gpu_group = "trainer" }

[tasks]
prompt_template = "$root/tests/pipeline/data/short_prompt_template.txt"

[sampler]
group_size = 4
max_new_tokens = 32
model = "$work/model"

[buffer]
groups_per_batch = 2

[sandbox]
backend = "nvcc"
EOF
else
  sed "s|@MODEL@|$model|g" "$manifest" >"$base"
fi

# set_key FILE TABLE KEY VALUE: in place, KEY = VALUE inside [TABLE]: replaces the key's line
# there, or adds it under the header, or adds the table at the end.
set_key() {
  local file=$1 table=${2//./\\.} key=$3 value=${4//|/\\|}
  value=${value//&/\\&}
  local head="^\\[$table\\]"
  if ! grep -q "$head[[:space:]]*\$" "$file"; then
    printf '\n[%s]\n%s = %s\n' "$2" "$key" "$4" >>"$file"
  elif sed -n "/$head/,/^\\[/p" "$file" | grep -q "^[[:space:]]*$key[[:space:]]*="; then
    sed -i "/$head/,/^\\[/ s|^[[:space:]]*$key[[:space:]]*=.*|$key = $value|" "$file"
  else
    sed -i "/$head/a $key = $value" "$file"
  fi
}
for kv in "${sets[@]}"; do
  [[ $kv =~ ^([A-Za-z0-9_.]+)\.([A-Za-z0-9_]+)=(.+)$ ]] ||
    { echo "loop_modes: --set $kv: expected TABLE.KEY=VALUE" >&2; exit 2; }
  set_key "$base" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
done

failed=0
for mode in sync async; do
  cp "$base" "$work/$mode.toml"
  set_key "$work/$mode.toml" run mode "\"$mode\""
  rm -rf "$work/$mode"
  args=(run --manifest "$work/$mode.toml" --run-dir "$work/$mode" --no-progress)
  [[ -n $steps ]] && args+=(--steps "$steps")
  echo "loop_modes: $mode: $kforge ${args[*]}" >&2
  t0=$SECONDS
  "$kforge" "${args[@]}" >"$work/$mode.log" 2>&1
  rc=$?
  echo "loop_modes: $mode: exit $rc after $((SECONDS - t0)) s, log $work/$mode.log" >&2
  ((rc == 0)) || failed=1
done

python3 - "$work" "$json" "$smoke" <<'EOF'
import json, pathlib, sys

work, out, smoke = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
GOAL = 0.6
runs = {}
for mode in ("sync", "async"):
    p = work / mode / "summary.json"
    if not p.exists():
        runs[mode] = {"outcome": "no summary.json", "log": str(work / (mode + ".log"))}
        continue
    s = json.loads(p.read_text())
    runs[mode] = {
        "outcome": s.get("outcome"),
        "mode": s.get("mode"),
        "versions": s.get("versions"),
        "elapsed_s": s.get("elapsed_s"),
        "loop_s": s.get("loop_s"),
        "seconds_per_step": s.get("seconds_per_step"),
        "balanced": s.get("balanced"),
        "gpu_groups": [dict({k: g.get(k) for k in ("name", "gpus", "busy_s", "elapsed_s",
                                                    "idle_fraction")},
                            stages=[{k: st.get(k) for k in ("stage", "busy_fraction")}
                                    for st in g.get("stages", [])])
                       for g in s.get("gpu_groups", [])],
        "run_dir": str(work / mode),
    }

def sps(m):
    v = runs[m].get("seconds_per_step")
    return v if isinstance(v, (int, float)) and v > 0 else None

ratio = sps("async") / sps("sync") if sps("async") and sps("sync") else None
# Whether the goal's premise held: in the sync run, the least busy group's busy time over the
# busiest's (1 = rollout and training took the same time; the goal assumes near 1).
busy = [g["busy_s"] for g in runs["sync"].get("gpu_groups", [])
        if g.get("stages") and isinstance(g.get("busy_s"), (int, float))]
balance = min(busy) / max(busy) if len(busy) >= 2 and max(busy) > 0 else None
result = {"bench": "loop_modes", "cpu_smoke": smoke, "goal_async_over_sync": GOAL,
          "async_over_sync": ratio, "goal_met": ratio is not None and ratio <= GOAL,
          "sync_busy_balance": balance, "runs": runs}

def f(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"

print(f"{'mode':<6} {'outcome':<11} {'versions':>8} {'s/step':>8} {'loop s':>8} {'elapsed s':>9}  idle per GPU group")
for mode in ("sync", "async"):
    r = runs[mode]
    idle = ", ".join(f"{g['name']} {100 * g['idle_fraction']:.0f}%" for g in r.get("gpu_groups", [])
                     if g.get("idle_fraction") is not None) or "-"
    print(f"{mode:<6} {str(r.get('outcome'))[:11]:<11} {str(r.get('versions', '-')):>8} "
          f"{f(sps(mode)):>8} {f(r.get('loop_s'), 1):>8} {f(r.get('elapsed_s'), 1):>9}  {idle}")
if ratio is None:
    print("async/sync: not available (a run did not publish a version)")
else:
    print(f"async/sync seconds per step: {ratio:.2f} (goal <= {GOAL}: "
          f"{'met' if ratio <= GOAL else 'NOT met'})")
if balance is not None:
    print(f"busy balance of the groups in the sync run: {balance:.2f} (1 = rollout and training "
          f"took equal time, as the goal assumes)")
if smoke:
    print("cpu smoke: the fixture model's trainer step is tiny next to generation, so this ratio "
          "says little about the goal; it checks the script and the summary fields.")
if out:
    pathlib.Path(out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"json: {out}")
EOF
py=$?
((py == 0)) || failed=1
exit $failed
