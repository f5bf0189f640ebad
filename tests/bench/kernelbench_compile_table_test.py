#!/usr/bin/env python3
"""bench/kernelbench_compile_table.py on a small fixture whose figures are worked out by hand:
level 1 has ratios 2.0 (conv), 0.5 and 1.0; level 2 has 1.5 and a failed line; level 3 one task
imported and never measured."""
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]
lines = [
    {"id": "kb/l1/1_Conv", "ok": True, "eager_ms": 2.0, "compile_ms": 1.0, "mode": "default", "device": "X"},
    {"id": "kb/l1/2_Relu", "ok": True, "eager_ms": 1.0, "compile_ms": 2.0, "mode": "default", "device": "X"},
    {"id": "kb/l1/3_Add", "ok": True, "eager_ms": 1.0, "compile_ms": 1.0, "mode": "default", "device": "X"},
    {"id": "kb/l2/1_Gemm", "ok": True, "eager_ms": 3.0, "compile_ms": 2.0, "mode": "default", "device": "X"},
    {"id": "kb/l2/2_Bad", "ok": False, "error": "time limit"},
]
tasks = [{"id": l["id"], "reference": "def forward(x):\n  return torch._convolution(x)" if "Conv" in l["id"]
          else "def forward(x):\n  return x"} for l in lines] + [{"id": "kb/l3/1_Net", "reference": ""}]
with tempfile.TemporaryDirectory() as d:
    b, t = os.path.join(d, "b.jsonl"), os.path.join(d, "t.jsonl")
    for path, rows in ((b, lines), (t, tasks)):
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([sys.executable, script, b, "--tasks", t], capture_output=True, text=True, check=True).stdout
    bad = open(os.path.join(d, "bad.jsonl"), "w")
    bad.write("{not json\n")
    bad.close()
    err = subprocess.run([sys.executable, script, bad.name], capture_output=True, text=True)
    other = os.path.join(d, "autotune.jsonl")
    with open(other, "w") as f:
        f.write(json.dumps(dict(lines[0], mode="max-autotune")) + "\n")
    mixed = subprocess.run([sys.executable, script, b, other], capture_output=True, text=True)

expect = [
    "mode default, device X",
    # geomean of 2, 0.5, 1 is 1; median 1; one faster, one slower
    "| l1 | — | 3 | 3 | 1 | 1 | **1.00** | 1.00 |",
    "| l1, with a convolution |  | 1 | 1 | 1 | 0 | **2.00** | 2.00 |",
    "| l1, without |  | 2 | 2 | 0 | 1 | **0.71** | 0.75 |",
    "| l2 | — | 2 | 1 | 1 | 0 | **1.50** | 1.50 |",
    "| l3 | — | 1 | 0 | 0 | 0 | — | — |",
    "not measured (ok: false): kb/l2/2_Bad",
    "imported, no line: kb/l3/1_Net",
]
missing = [e for e in expect if e not in out.splitlines()]
if missing:
    print(out)
    sys.exit("missing lines: %s" % missing)
if err.returncode == 0 or "bad.jsonl:1: not a JSON line" not in err.stderr:
    sys.exit("a bad line was not refused clearly: rc %d, %r" % (err.returncode, err.stderr))
if mixed.returncode == 0 or "several torch.compile modes (default, max-autotune)" not in mixed.stderr:
    sys.exit("lines of two modes were not refused: rc %d, %r" % (mixed.returncode, mixed.stderr))
print("ok")
