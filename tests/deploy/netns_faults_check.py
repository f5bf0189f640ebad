#!/usr/bin/env python3
"""Checks one run of netns_faults_test.sh against what its fault must and must not do.

  netns_faults_check.py SCENARIO RUN_PARENT T_FAULT T_UP VERSIONS_AT_FAULT NOTICE_BOUND REJOIN_BOUND

Reads RUN_PARENT/run/summary.json, the head's log (RUN_PARENT/head.err: the sandbox pool's
"worker ... joined/lost/left" lines) and the workers' logs. Prints what it measured and, last, a
Markdown table row; exits 1 naming each check that failed.
"""
import datetime
import json
import os
import re
import sys

scenario, parent = sys.argv[1], sys.argv[2]
t_fault, t_up = float(sys.argv[3]), float(sys.argv[4])
at_fault = int(sys.argv[5])
notice_bound, rejoin_bound = float(sys.argv[6]), float(sys.argv[7])
A, B = "sandbox_worker@sba", "sandbox_worker@sbb"

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


# 2026-12-06T11:19:01.360 warning sandbox_pool: worker W lost (silent for 1003 ms) after 12 items, ...
LINE = re.compile(r"^(\S+)\s+\w+\s+sandbox_pool: worker (\S+) (joined|lost|left) \((.*)\)"
                  r"(?: after (\d+) items, (\d+) judged; (\d+) re-queued, (\d+) failed)?")
events = []
with open(f"{parent}/head.err") as f:
    for text in f:
        m = LINE.match(text)
        if not m:
            continue
        # Log lines carry local time, as does time.time() once made naive the same way.
        t = datetime.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
        n = [int(x) if x else 0 for x in m.groups()[4:]]
        events.append({"t": t, "worker": m[2], "what": m[3], "why": m[4], "taken": n[0],
                       "judged": n[1], "requeued": n[2], "failed": n[3]})

s = json.load(open(f"{parent}/run/summary.json"))
stages = {st["stage"]: st for st in s["stages"]}
extra = stages["sandbox_pool"]["extra"]
reward = stages["reward"]
check(s["outcome"] == "completed", f"outcome {s['outcome']}")
bad = [c["check"] for c in s["checks"] if not c["ok"]]
check(not bad and s["balanced"], f"count checks failed: {bad}")
versions = s["versions"]
# The run went on: the trainer took more batches after the fault than a couple of steps' worth.
check(versions >= at_fault + 3, f"{versions} versions at the end, {at_fault} at the fault")
# Nothing lost: an item given up on would be failed (an infra_error verdict); one neither judged,
# failed nor left unjudged at the stop would break the pool's balance (checked above).
lost = extra["failed"]
check(lost == 0, f"{lost} items failed (lost by two workers)")
# Nothing judged twice: the reward got exactly one verdict per item the pool completed or failed.
duplicated = reward["received"] - (extra["completed"] + extra["failed"])
check(duplicated == 0, f"reward received {reward['received']} verdicts for "
      f"{extra['completed'] + extra['failed']} items")
check(sum(e["requeued"] for e in events if e["what"] == "lost") == extra["requeued"],
      "the pool's lost lines and its requeued counter disagree")
lost_lines = [e for e in events if e["what"] == "lost"]
check(any(e["worker"] == B and e["what"] == "left" and e["taken"] > 0 for e in events),
      "host B's worker took no work")

noticed = rejoined = None
first_lost = next((e for e in lost_lines if e["worker"] == A and e["t"] >= t_fault - 0.05), None)
if scenario in ("kill", "link"):
    if check(first_lost is not None, "no line saying host A's worker was lost"):
        noticed = first_lost["t"] - t_fault
        check(noticed <= notice_bound, f"host A's loss noticed after {noticed:.2f} s "
              f"(bound {notice_bound} s)")
        check(first_lost["requeued"] >= 1, "none of host A's items was re-queued")
    check(extra["workers_dead"] >= 1, "no worker was declared dead")
    check(extra["requeued"] >= 1, "nothing was re-queued")
if scenario == "link":
    back = next((e for e in events if e["worker"] == A and e["what"] == "joined"
                 and e["t"] >= t_up - 0.05), None)
    if check(back is not None, "host A's worker never joined again"):
        rejoined = back["t"] - t_up
        check(rejoined <= rejoin_bound, f"host A rejoined {rejoined:.2f} s after its link came "
              f"back (bound {rejoin_bound} s)")
        last = [e for e in events if e["worker"] == A and e["what"] == "left" and e["t"] > back["t"]]
        check(bool(last) and last[-1]["taken"] > 0, "host A took no work after it joined again")
if scenario == "netem":
    a_left = [e for e in events if e["worker"] == A and e["what"] == "left"]
    check(bool(a_left) and a_left[-1]["taken"] > 0, "host A took no work over its slow link")

# Every host still up at the end ends with the run, told by the head, not by its orphan timeout.
for host in ["roll", "sbb"] + ([] if scenario == "kill" else ["sba"]):
    log = open(f"{parent}/{host}.log").read()
    check("shut down" in log and "silent on the control link" not in log,
          f"host {host}'s process did not end with the run: " + log.strip()[-300:])

faults = {
    "none": "none (the same run without a fault)",
    "kill": "SIGKILL every process of sandbox host A",
    "link": "host A's link down 10 s, then up",
    "netem": "netem 50 ms delay + 5 % loss each way on host A's link",
}
if os.environ.get("NETEM_QDISC"):  # the scenario's steps tried with another qdisc
    faults["netem"] = f"tc qdisc {os.environ['NETEM_QDISC']} each way on host A's link (not netem)"
# Losses the fault does not explain: a worker (or the pool) starved of the CPU for 4 heartbeats on
# an overloaded machine is declared lost too. Its items are re-queued like any other's, so they
# are reported, and the checks above (nothing lost, nothing judged twice) still hold.
spurious = len(lost_lines) - (1 if first_lost is not None and scenario in ("kill", "link") else 0)
fmt = lambda x: "—" if x is None else f"{x:.2f} s"
a_taken = sum(e["taken"] for e in events if e["worker"] == A)
b_taken = sum(e["taken"] for e in events if e["worker"] == B)
dead = f"{extra['workers_dead']}" + (f" ({spurious} not the fault's)" if spurious else "")
print(f"   {scenario}: noticed {fmt(noticed)}, rejoined {fmt(rejoined)}, requeued "
      f"{extra['requeued']}, failed {lost}, duplicated {duplicated}, workers dead {dead}, "
      f"stale results {extra['stale_results']}, items taken A {a_taken} B {b_taken}, "
      f"versions {at_fault} -> {versions}, {s['elapsed_s']:.1f} s")
for f in failures:
    print(f"   check failed: {f}")
print(f"| {faults[scenario]} | {fmt(noticed)} | {extra['requeued']} | {lost} | {duplicated} | "
      f"{dead} | {fmt(rejoined)} | {versions} ({at_fault} at the fault) | "
      f"{s['outcome']} |")
sys.exit(1 if failures else 0)
