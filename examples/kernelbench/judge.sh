#!/usr/bin/env bash
# Judges the hand-written example kernels (examples/kernelbench/kb/...) on their KernelBench
# problems, on a GPU host:
#   examples/kernelbench/judge.sh --kernelbench DIR --kforge BIN --out OUTDIR [--baselines FILE]
#                                 [-- EXTRA kforge eval ARGUMENTS]
# DIR is a KernelBench checkout (DIR/KernelBench/level1 or DIR/level1). Imports exactly the
# problems below into OUTDIR/kb.jsonl, then runs `kforge eval` on the examples, writing
# OUTDIR/verdicts.jsonl, OUTDIR/summary.json and OUTDIR/eval.log. With --baselines (a file made by
# `kforge tasks baseline OUTDIR/kb.jsonl --against compile --out FILE` or
# bench/kernelbench_compile.sh on this GPU model), speedups against torch.compile are added.
# Extra arguments after `--` go to kforge eval (e.g. --gpus 0, --seed 1, --compile-only).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The problems the examples solve, as KernelBench files; the task id is kb/l<level>/<file name
# without .py and trailing underscores>, and the kernel is kb/l<level>/<that name>/kernel.cu here.
problems=(
  level1/20_LeakyReLU.py
  level1/26_GELU_.py
  level1/29_Softplus.py
  level1/24_LogSoftmax.py
  level1/47_Sum_reduction_over_a_dimension.py
  level1/36_RMSNorm_.py
  level1/40_LayerNorm.py
  level1/4_Matrix_vector_multiplication_.py
  level2/76_Gemm_Add_ReLU.py
  level2/86_Matmul_Divide_GELU.py
  level2/56_Matmul_Sigmoid_Sum.py
)

usage() { sed -n 4,5p "$0" >&2; exit 2; }
die() { echo "judge.sh: $*" >&2; exit 2; }

kb='' kforge='' out='' baselines=''
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --kernelbench|--kforge|--out|--baselines)
      [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"
      case $1 in
        --kernelbench) kb=$2 ;;
        --kforge) kforge=$2 ;;
        --out) out=$2 ;;
        --baselines) baselines=$2 ;;
      esac
      shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "judge.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[[ -n $kb && -n $kforge && -n $out ]] || usage

[[ -x $kforge && -f $kforge ]] || die "--kforge $kforge: not an executable file"
if [[ -d $kb/KernelBench/level1 ]]; then
  src=$kb/KernelBench
elif [[ -d $kb/level1 ]]; then
  src=$kb
else
  die "--kernelbench $kb: no KernelBench/level1 or level1 folder there"
fi
if [[ -n $baselines ]]; then
  [[ -f $baselines && -s $baselines ]] || die "--baselines $baselines: no such file, or empty"
fi

files=() ids=()
for p in "${problems[@]}"; do
  [[ -f $src/$p ]] || die "$src/$p: missing (is $kb a KernelBench checkout?)"
  files+=("$src/$p")
  level=${p%%/*} name=$(basename "$p" .py)
  # 26_GELU_ -> 26_GELU, as the importer names tasks
  while [[ $name == *_ ]]; do name=${name%_}; done
  id=kb/l${level#level}/$name
  [[ -f $here/$id/kernel.cu ]] || die "$here/$id/kernel.cu: missing"
  ids+=("$id")
done

mkdir -p "$out" || die "--out $out: cannot create"
tasks=$out/kb.jsonl
echo "judge.sh: importing ${#files[@]} problems from $src into $tasks" >&2
if ! "$kforge" tasks import-kernelbench "${files[@]}" --out "$tasks" \
    --failures "$out/kb_not_imported.jsonl" >"$out/import.log" 2>&1; then
  cat "$out/import.log" >&2
  die "import failed (log: $out/import.log)"
fi
if [[ -s $out/kb_not_imported.jsonl ]]; then
  cat "$out/kb_not_imported.jsonl" >&2
  die "some problems were not imported (listed above)"
fi
# Every example's task must be there, and nothing else.
got=$(grep -o '"id": *"[^"]*"' "$tasks" | sed 's/.*"\([^"]*\)"$/\1/' | sort)
want=$(printf '%s\n' "${ids[@]}" | sort)
[[ $got == "$want" ]] || die "$tasks holds other task ids than expected:
$(diff <(echo "$want") <(echo "$got") || true)"

args=(eval --tasks "$tasks" --candidates "$here" --out "$out/verdicts.jsonl"
      --summary "$out/summary.json")
[[ -n $baselines ]] && args+=(--baselines "$baselines")
args+=("${extra[@]}")
echo "judge.sh: $kforge ${args[*]}" >&2
set +e
"$kforge" "${args[@]}" 2>&1 | tee "$out/eval.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] || die "kforge eval exited with $rc (log: $out/eval.log)"
echo "judge.sh: verdicts in $out/verdicts.jsonl, summary in $out/summary.json" >&2
