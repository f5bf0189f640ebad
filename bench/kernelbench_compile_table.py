#!/usr/bin/env python3
"""Per-level table of torch.compile against eager, from the lines bench/kernelbench_compile.sh (or
`kforge tasks baseline --against compile`) wrote, in the form docs/results.md gives it:

  bench/kernelbench_compile_table.py BASELINES.jsonl... [--tasks TASKS.jsonl...] [--kernelbench DIR]

For each level (the `l1` of `kb/l1/23_Softmax`): the problems in DIR/level<N> (with --kernelbench),
the tasks imported (with --tasks), the tasks measured (`ok` lines), how many compile > 5 % faster
and > 5 % slower than eager, and the geomean and median of eager_ms / compile_ms (above 1:
compile is faster). With --tasks, each level is also split by whether the reference has a
convolution (where torch.compile's gains differ most). A task measured in several files counts
once: its last ok line. Lines of two compile modes are refused: a table is of one mode. No
third-party module is needed, so it runs anywhere.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys


def read_lines(path):
    try:
        with open(path) as f:
            rows = []
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        sys.exit("%s:%d: not a JSON line (%s)" % (path, n, e.msg))
            return rows
    except OSError as e:
        sys.exit("%s: %s" % (path, e.strerror))


def level_of(task_id):
    m = re.match(r"^(?:kb/)?(l\d+)/", task_id)
    return m.group(1) if m else "other"


def has_convolution(task):
    return re.search(r"conv", task.get("reference", ""), re.IGNORECASE) is not None


def row(label, problems, imported, ratios):
    faster = sum(r > 1.05 for r in ratios)
    slower = sum(r < 1 / 1.05 for r in ratios)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        figures = "**%.2f** | %.2f" % (geo, statistics.median(ratios))
    else:
        figures = "— | —"
    return "| %s | %s | %s | %d | %d | %d | %s |" % (label, problems, imported, len(ratios), faster, slower,
                                                      figures)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("baselines", nargs="+", help="JSON lines of measure_baselines.py")
    ap.add_argument("--tasks", nargs="*", default=[], help="the task files measured (imported counts, convolutions)")
    ap.add_argument("--kernelbench", help="a KernelBench folder holding level1, level2, level3 (problem counts)")
    a = ap.parse_args()

    measured = {}
    modes, devices = set(), set()
    for path in a.baselines:
        for r in read_lines(path):
            if "id" not in r:
                sys.exit("%s: a line without an id" % path)
            if r.get("ok") and r.get("eager_ms", 0) > 0 and r.get("compile_ms", 0) > 0:
                measured[r["id"]] = r["eager_ms"] / r["compile_ms"]
                modes.add(r.get("mode", "?"))
                devices.add(r.get("device", "?"))
            elif r["id"] not in measured:
                measured.setdefault(r["id"], None)
    if len(modes) > 1:  # a task's last line would win whatever its mode: one table, one mode
        sys.exit("lines of several torch.compile modes (%s): give one mode's files" % ", ".join(sorted(modes)))
    tasks = {}
    for path in a.tasks:
        for t in read_lines(path):
            tasks[t["id"]] = t

    levels = sorted({level_of(i) for i in list(measured) + list(tasks)})
    print("mode %s, device %s" % (", ".join(sorted(modes)) or "?", ", ".join(sorted(devices)) or "?"))
    print("| level | problems | imported | measured | compile > 5 % faster | compile > 5 % slower "
          "| geomean eager / compile | median |")
    print("|---|---|---|---|---|---|---|---|")
    for lv in levels:
        problems = "—"
        if a.kernelbench:
            folder = os.path.join(a.kernelbench, "level" + lv[1:])
            if os.path.isdir(folder):
                problems = str(sum(f.endswith(".py") for f in os.listdir(folder)))
        ids = [i for i in measured if level_of(i) == lv]
        ratios = [measured[i] for i in ids if measured[i] is not None]
        imported = str(sum(level_of(i) == lv for i in tasks)) if tasks else "—"
        print(row(lv, problems, imported, ratios))
        if tasks:
            for conv, label in ((True, "with a convolution"), (False, "without")):
                part = [i for i in tasks if level_of(i) == lv and has_convolution(tasks[i]) == conv]
                r = [measured[i] for i in part if measured.get(i) is not None]
                print(row("%s, %s" % (lv, label), "", str(len(part)), r))
    unmeasured = sorted(i for i, v in measured.items() if v is None)
    if unmeasured:
        print("not measured (ok: false): " + ", ".join(unmeasured))
    if tasks:
        missing = sorted(i for i in tasks if i not in measured)
        if missing:
            print("imported, no line: " + ", ".join(missing))


if __name__ == "__main__":
    main()
