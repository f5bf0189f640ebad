#!/usr/bin/env python3
"""Episodes against single-shot samples at an equal sandbox budget, as an SVG chart:

  bench/episodes_chart.py --out CHART.svg [--title TEXT] \\
      --episodes LABEL=VERDICTS.jsonl[.gz] ... --single-shot LABEL=VERDICTS.jsonl[.gz] ...

VERDICTS are the verdict lines `kforge optimize` (episodes: each line has "episode" and "turn") and
`kforge eval` (single-shot samples) write, over the same tasks. Two panels, each against the
candidates judged per task (the sandbox budget):
- tasks with a correct kernel: for episodes, after turns 1, 2, ... (each task's candidates judged
  up to that turn, averaged over tasks); for single-shot, the expected number of tasks solved by k
  of its n samples drawn without replacement (1 - C(n-c, k) / C(n, k) summed over tasks), k = 1..n;
- mean best speedup over eager per task, a task without a correct kernel counting 0: for
  single-shot the expected best of k samples (sorted speedups v_1 <= ... <= v_n: the sum of
  v_i C(i-1, k-1) / C(n, k)).
Single-shot curves are expectations, episodes' points are what was measured. Every curve's tasks
are those of its file; the chart says how many. No third-party module is needed.
"""
import argparse
import gzip
import json
import math
import sys
from collections import defaultdict

WIDTH, HEIGHT, PANEL_W, PANEL_H = 860, 450, 340, 270
LEFT, TOP = 60, 70
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def fail(msg):
    print("episodes_chart: " + msg, file=sys.stderr)
    sys.exit(2)


def read_verdicts(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        fail("%s: %s" % (path, e.strerror or e))
    except ValueError as e:
        fail("%s: not JSON lines: %s" % (path, e))
    for n, r in enumerate(rows, 1):
        if not isinstance(r, dict) or "task" not in r or "status" not in r:
            fail("%s:%d: a verdict line needs \"task\" and \"status\"" % (path, n))
    if not rows:
        fail("%s: no verdict lines" % path)
    return rows


def speed(r):
    """A candidate's speedup over eager; 0 unless correct."""
    return float(r.get("speedup") or 0.0) if r["status"] == "ok" else 0.0


def group_by_task(rows):
    by_task = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    return by_task


def episode_points(rows, path):
    """[(candidates per task, tasks solved, mean best speedup)] after each turn."""
    if any("turn" not in r or "episode" not in r for r in rows):
        fail("%s: episode verdicts need \"episode\" and \"turn\" (kforge optimize's lines)" % path)
    by_task = group_by_task(rows)
    points = []
    for t in range(1, max(int(r["turn"]) for r in rows) + 1):
        spent = solved = best_sum = 0.0
        for cands in by_task.values():
            upto = [r for r in cands if int(r["turn"]) <= t]
            spent += len(upto)
            solved += any(r["status"] == "ok" for r in upto)
            best_sum += max((speed(r) for r in upto), default=0.0)
        points.append((spent / len(by_task), solved, best_sum / len(by_task)))
    return points, len(by_task)


def single_shot_points(rows):
    """[(k, expected tasks solved by k samples, expected mean best-of-k speedup)], k = 1..n (the
    fewest samples any task has)."""
    by_task = group_by_task(rows)
    n_min = min(len(v) for v in by_task.values())
    points = []
    for k in range(1, n_min + 1):
        solved = best_sum = 0.0
        for cands in by_task.values():
            n, c = len(cands), sum(r["status"] == "ok" for r in cands)
            solved += 1.0 - math.comb(n - c, k) / math.comb(n, k)
            v = sorted(speed(r) for r in cands)
            best_sum += sum(v[i] * math.comb(i, k - 1) for i in range(n)) / math.comb(n, k)
        points.append((k, solved, best_sum / len(by_task)))
    return points, len(by_task)


def labelled(spec, flag):
    if "=" not in spec:
        fail("%s %s: give LABEL=FILE" % (flag, spec))
    label, path = spec.split("=", 1)
    return label, path


def panel(x0, title, series, x_max, y_max, y_of, y_fmt):
    """One panel's SVG: axes, grid, a line with markers per series (dashed for expectations)."""
    def px(x): return x0 + x / x_max * PANEL_W
    def py(y): return TOP + PANEL_H - y / y_max * PANEL_H
    out = ['<text x="%g" y="%d" font-size="13" text-anchor="middle">%s</text>' % (x0 + PANEL_W / 2, TOP - 12, title)]
    for i in range(5):
        y = y_max * i / 4
        out.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>' % (x0, py(y), x0 + PANEL_W, py(y)))
        out.append('<text x="%g" y="%g" font-size="11" text-anchor="end">%s</text>' % (x0 - 5, py(y) + 4, y_fmt(y)))
    for x in range(0, int(x_max) + 1, max(1, int(x_max) // 9)):
        out.append('<text x="%g" y="%d" font-size="11" text-anchor="middle">%d</text>' % (px(x), TOP + PANEL_H + 15, x))
    out.append('<rect x="%g" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (x0, TOP, PANEL_W, PANEL_H))
    out.append('<text x="%g" y="%d" font-size="11" text-anchor="middle">candidates judged per task</text>'
               % (x0 + PANEL_W / 2, TOP + PANEL_H + 32))
    for color, dashed, points in series:
        xy = " ".join("%.1f,%.1f" % (px(p[0]), py(y_of(p))) for p in points)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                   % (xy, color, ' stroke-dasharray="5,4"' if dashed else ""))
        for p in points:
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (px(p[0]), py(y_of(p)), color))
    return out


def chart(title, curves):
    """curves: [(label, is_episodes, points, tasks)] -> SVG text."""
    x_max = max(p[0] for _, _, pts, _ in curves for p in pts)
    tasks_max = max(t for *_, t in curves)
    speed_max = max(p[2] for _, _, pts, _ in curves for p in pts)
    speed_max = math.ceil(speed_max * 4 + 0.5) / 4
    series = [(COLORS[i % len(COLORS)], not ep, pts) for i, (_, ep, pts, _) in enumerate(curves)]
    legend_top = TOP + PANEL_H + 60
    height = max(HEIGHT, legend_top + 16 * len(curves))
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (WIDTH, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15">%s</text>' % (LEFT, title)]
    svg += panel(LEFT, "tasks with a correct kernel (of %d)" % tasks_max, series, x_max, tasks_max,
                 lambda p: p[1], lambda y: "%d" % round(y))
    svg += panel(LEFT + PANEL_W + 90, "mean best speedup over eager (none = 0)", series, x_max, speed_max,
                 lambda p: p[2], lambda y: "%.2f" % y)
    for i, (label, ep, pts, tasks) in enumerate(curves):  # one a row: labels can be long
        y, x = legend_top + 16 * i, LEFT
        kind = "episodes, after each turn" if ep else "single-shot, expected best of k"
        svg.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   % (x, y - 4, x + 24, y - 4, COLORS[i % len(COLORS)], "" if ep else ' stroke-dasharray="5,4"'))
        svg.append('<text x="%d" y="%d" font-size="12">%s (%s; %d tasks)</text>' % (x + 30, y, label, kind, tasks))
    svg.append("</svg>")
    return "\n".join(svg) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="Episodes against single-shot samples at an equal budget")
    ap.add_argument("--episodes", action="append", default=[], metavar="LABEL=FILE")
    ap.add_argument("--single-shot", action="append", default=[], metavar="LABEL=FILE")
    a = ap.parse_args()
    if not a.episodes and not a.single_shot:
        fail("nothing to draw: give --episodes and/or --single-shot LABEL=FILE")
    curves = []
    for spec in a.episodes:
        label, path = labelled(spec, "--episodes")
        pts, tasks = episode_points(read_verdicts(path), path)
        curves.append((label, True, pts, tasks))
    for spec in a.single_shot:
        label, path = labelled(spec, "--single-shot")
        pts, tasks = single_shot_points(read_verdicts(path))
        curves.append((label, False, pts, tasks))
    try:
        with open(a.out, "w") as f:
            f.write(chart(a.title, curves))
    except OSError as e:
        fail("%s: %s" % (a.out, e.strerror or e))
    for label, ep, pts, tasks in curves:
        print("%s (%s, %d tasks): %s" % (label, "episodes" if ep else "single-shot", tasks,
                                         ", ".join("%.1f: %.1f tasks, %.3fx" % p for p in pts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
