#!/usr/bin/env python3
"""How much of a CUDA-graph mode's time over default's is the copy of its inputs.

  bench/cudagraph_copy_estimate.py TASKS.jsonl DEFAULT.jsonl MODE.jsonl [--bandwidth B]

TASKS.jsonl: the kforge tasks measured; DEFAULT.jsonl and MODE.jsonl: lines of
bench/kernelbench_compile.sh for torch.compile's default mode and for a mode that runs CUDA graphs
(max-autotune, reduce-overhead), on the same GPU. A CUDA graph reads its inputs at fixed addresses,
so each call copies every input it does not know to stay put; a line with `static_inputs` left
those inputs in place. Per task, the copy is estimated as each copied input's bytes read and
written once at B bytes/s (default 3e12, about an H100's HBM3), and the table gives the mode's time
over default's with and without that estimate, so one can see whether the copy is what the mode
loses. An estimate, not a measurement: the copy's real speed is not timed.
"""
import argparse
import json
import math
import sys

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "bool": 1}
GRAPH_MODES = ("reduce-overhead", "max-autotune")


def by_id(path):
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as e:
                    sys.exit("%s:%d: not JSON: %s" % (path, n, e))
                out[row.get("id")] = row
    return out


def refuse(rows, path, good, why):
    """Exits naming the first measured line of `path` that is not `good`."""
    for tid, r in rows.items():
        if r.get("ok") and not good(r):
            sys.exit("%s: %s %s" % (path, tid, why))


def copied_bytes(task, static):
    return sum(math.prod(i["shape"]) * BYTES[i["dtype"]] for i in task["inputs"] if i["name"] not in static)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks")
    ap.add_argument("default")
    ap.add_argument("mode")
    ap.add_argument("--bandwidth", type=float, default=3e12, help="bytes/s a copy reads and writes at (default 3e12)")
    a = ap.parse_args()
    if a.bandwidth <= 0:
        sys.exit("--bandwidth %g: must be positive" % a.bandwidth)
    tasks, base, mode = by_id(a.tasks), by_id(a.default), by_id(a.mode)
    refuse(base, a.default, lambda r: r.get("mode") == "default", "holds lines of a mode other than default")
    refuse(mode, a.mode, lambda r: r.get("mode") in GRAPH_MODES, "holds lines of a mode without CUDA graphs (%s)"
           % ", ".join(GRAPH_MODES))
    for rows, path in ((base, a.default), (mode, a.mode)):
        refuse(rows, path, lambda r: r.get("shapes", "primary") == "primary", "holds lines timed at other than the primary shapes")
    devices = {r.get("device") for r in list(base.values()) + list(mode.values()) if r.get("ok")}
    if len(devices) > 1:
        print("note: the two files' times come from %s" % ", ".join(sorted(map(str, devices))))
    print("%-46s %9s %9s %9s %8s %8s" % ("task", "copy ms", "excess ms", "default", "mode/def", "less copy"))
    for tid, row in mode.items():
        b = base.get(tid)
        if tid not in tasks or not b or not (row.get("ok") and b.get("ok")):
            print("%-46s not in all three files, or not ok in both" % tid)
            continue
        copy_ms = 2 * copied_bytes(tasks[tid], set(row.get("static_inputs", []))) / a.bandwidth * 1e3
        d, m = b["compile_ms"], row["compile_ms"]
        print("%-46s %9.3f %9.3f %9.3f %8.2f %8.2f" % (tid[:46], copy_ms, m - d, d, m / d, (m - copy_ms) / d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
