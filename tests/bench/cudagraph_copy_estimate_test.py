#!/usr/bin/env python3
"""bench/cudagraph_copy_estimate.py on a fixture worked out by hand: at 12e6 bytes/s, 6,000 bytes
of inputs copied (read and written) take 1 ms; with the 2,000-byte parameter left in place (a line
with static_inputs), 0.667 ms. A task missing from a file is said, and a bad bandwidth refused."""
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]
inputs = [{"name": "x", "shape": [10, 100], "dtype": "float32"},
          {"name": "w", "shape": [500], "dtype": "float32", "role": "parameter"}]
tasks = [{"id": "kb/l2/1_A", "inputs": inputs}, {"id": "kb/l2/2_B", "inputs": inputs}, {"id": "kb/l2/3_C", "inputs": inputs}]
default = [{"id": t["id"], "ok": True, "compile_ms": 1.0, "mode": "default"} for t in tasks[:2]]
mode = [{"id": "kb/l2/1_A", "ok": True, "compile_ms": 1.5, "mode": "max-autotune"},
        {"id": "kb/l2/2_B", "ok": True, "compile_ms": 2.0, "static_inputs": ["w"], "mode": "max-autotune"},
        {"id": "kb/l2/3_C", "ok": True, "compile_ms": 2.0, "mode": "max-autotune"}]
failures = 0
with tempfile.TemporaryDirectory() as d:
    paths = []
    for name, rows in (("tasks", tasks), ("default", default), ("mode", mode)):
        paths.append(os.path.join(d, name + ".jsonl"))
        with open(paths[-1], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([sys.executable, script, *paths, "--bandwidth", "12e6"], capture_output=True, text=True)
    bad = subprocess.run([sys.executable, script, *paths, "--bandwidth", "0"], capture_output=True, text=True)
    # Files swapped: the "mode" file holds default's lines, which ran no CUDA graphs.
    swapped = subprocess.run([sys.executable, script, paths[0], paths[2], paths[1]], capture_output=True, text=True)

rows = {l.split()[0]: l.split()[1:] for l in out.stdout.splitlines()[1:]}
expect = {"kb/l2/1_A": ["1.000", "0.500", "1.000", "1.50", "0.50"],  # every input copied
          "kb/l2/2_B": ["0.667", "1.000", "1.000", "2.00", "1.33"]}  # w static: x alone copied
for tid, want in expect.items():
    if rows.get(tid) != want:
        print("FAILED: %s: %s, expected %s" % (tid, rows.get(tid), want))
        failures += 1
if "not in all three files" not in " ".join(rows.get("kb/l2/3_C", [])):
    print("FAILED: a task missing from the default file is not said: %s" % rows.get("kb/l2/3_C"))
    failures += 1
if swapped.returncode == 0 or "mode other than default" not in swapped.stderr:
    print("FAILED: swapped files accepted: %s" % swapped.stderr)
    failures += 1
if out.returncode != 0 or bad.returncode == 0 or "--bandwidth" not in bad.stderr:
    print("FAILED: exit %d on good input, %d on a bad bandwidth (%s)" % (out.returncode, bad.returncode, bad.stderr))
    failures += 1
print(out.stdout)
print("%d check(s) failed" % failures if failures else "all checks passed")
sys.exit(1 if failures else 0)
