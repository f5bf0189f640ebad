#!/usr/bin/env python3
"""bench/episodes_chart.py on a fixture whose points are worked out by hand, and its refusals.

Single-shot: task a has 4 samples, two correct (2.0x, 1.0x); task b 4 failures. By k samples:
tasks solved 1 - C(2,k)/C(4,k) for a: 0.5 (k=1), 5/6 (k=2), 1 (k=3, 4); mean best speedup over
both tasks (b counts 0): (0+0+1+2)/4/2 = 0.375, (1*C(2,1) + 2*C(3,1))/C(4,2)/2 = 0.667, ..., 1.0.
Episodes: a's episode 0 fails turn 1 and reaches 1.5x at turn 2, its episode 1 is 0.5x at turn 1
(and ends); b fails twice. After turn 1: 1.5 candidates a task, 1 task, (0.5 + 0)/2 = 0.25;
after turn 2: 2.5, 1 task, 0.75."""
import gzip
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what)


def v(task, status, speedup=None, **more):
    return dict(task=task, status=status, speedup=speedup, **more)


single = [v("a", "ok", 2.0), v("a", "wrong_answer"), v("a", "compile_error"), v("a", "ok", 1.0)] + \
         [v("b", "runtime_error")] * 4
episodes = [v("a", "compile_error", episode=0, turn=1), v("a", "ok", 1.5, episode=0, turn=2),
            v("a", "ok", 0.5, episode=1, turn=1),
            v("b", "wrong_answer", episode=0, turn=1), v("b", "wrong_answer", episode=0, turn=2)]


def run(*args):
    return subprocess.run([sys.executable, script] + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    s, e = os.path.join(d, "s.jsonl"), os.path.join(d, "e.jsonl.gz")
    with open(s, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in single)
    with gzip.open(e, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in episodes)
    out = os.path.join(d, "chart.svg")
    r = run("--out", out, "--episodes", "E=" + e, "--single-shot", "S=" + s)
    check(r.returncode == 0, "draws: %s" % r.stderr)
    lines = r.stdout.splitlines()
    check("E (episodes, 2 tasks): 1.5: 1.0 tasks, 0.250x, 2.5: 1.0 tasks, 0.750x" in lines,
          "episode points after each turn: %s" % lines)
    check("S (single-shot, 2 tasks): 1.0: 0.5 tasks, 0.375x, 2.0: 0.8 tasks, 0.667x, 3.0: 1.0 tasks, 0.875x, "
          "4.0: 1.0 tasks, 1.000x" in lines, "single-shot expected best of k: %s" % lines)
    svg = open(out).read() if os.path.exists(out) else ""
    check(svg.startswith("<svg") and svg.count("<polyline") == 4 and "stroke-dasharray" in svg,
          "an SVG with a line per curve and panel, single-shot dashed")

    # A correct verdict without a speedup still solves its task, on both sides alike.
    nospeed = os.path.join(d, "nospeed.jsonl")
    with open(nospeed, "w") as f:
        f.write(json.dumps(v("c", "ok", episode=0, turn=1)) + "\n")
    r = run("--out", out, "--episodes", "E=" + nospeed, "--single-shot", "S=" + nospeed)
    check("E (episodes, 1 tasks): 1.0: 1.0 tasks, 0.000x" in r.stdout.splitlines() and
          "S (single-shot, 1 tasks): 1.0: 1.0 tasks, 0.000x" in r.stdout.splitlines(),
          "a correct kernel without a speedup is a solved task on both sides: %s" % r.stdout)

    # Refusals: exit 2 and a reason, no chart.
    bad = os.path.join(d, "bad.svg")
    r = run("--out", bad, "--episodes", "E=" + s)
    check(r.returncode == 2 and "need \"episode\" and \"turn\"" in r.stderr and not os.path.exists(bad),
          "single-shot lines given as episodes are refused: %s" % r.stderr)
    r = run("--out", bad, "--single-shot", "S=" + os.path.join(d, "missing.jsonl"))
    check(r.returncode == 2 and "missing.jsonl" in r.stderr, "a missing file is refused: %s" % r.stderr)
    r = run("--out", bad, "--single-shot", s)
    check(r.returncode == 2 and "LABEL=FILE" in r.stderr, "a curve without a label is refused: %s" % r.stderr)
    with open(os.path.join(d, "notask.jsonl"), "w") as f:
        f.write('{"status": "ok"}\n')
    r = run("--out", bad, "--single-shot", "S=" + os.path.join(d, "notask.jsonl"))
    check(r.returncode == 2 and ":1: a verdict line needs" in r.stderr, "a line without a task is refused: %s" % r.stderr)
    r = run("--out", bad)
    check(r.returncode == 2 and "nothing to draw" in r.stderr, "no curve is refused")

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
