#!/usr/bin/env python3
"""How often a policy's samples restate their task's reference exactly (kforge-tiny's diagnostic).

The corpus's explanations open with "The reference computes `<forward's body, lines joined by
'; '>`." (corpus/kernel_writer.cpp), so a model that reads the prompt copies that body; one that
does not writes another op there and its kernel follows that op. Counting exact restatements
separates "cannot read the prompt" from "reads it but writes a wrong kernel".

Usage: deploy/tiny_restatement.py [--summary] SAMPLES_DIR   (kforge sample's --out: tasks.jsonl,
samples.jsonl). Prints the totals, then (without --summary) per task the wanted body and the two
most common restatements.
"""
import collections
import json
import re
import sys


def body(reference):
    out, started = [], False
    for line in reference.split("\n"):
        if line.startswith("def forward"):
            started = True
            continue
        if started and line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return "; ".join(out)


def main(d, summary):
    tasks = {}
    with open(d + "/tasks.jsonl") as f:
        for line in f:
            t = json.loads(line)
            tasks[t["id"]] = t
    got = collections.defaultdict(list)
    with open(d + "/samples.jsonl") as f:
        for line in f:
            s = json.loads(line)
            m = re.match(r"The reference computes `(.*?)`\. ", s.get("completion", ""))
            got[s["task_id"]].append(m.group(1) if m else "(none)")
    exact = {t: sum(g == body(tasks[t]["reference"]) for g in v) for t, v in got.items()}
    print("restated exactly: %d of %d samples; tasks with at least one: %d of %d"
          % (sum(exact.values()), sum(len(v) for v in got.values()), sum(1 for n in exact.values() if n), len(got)))
    if summary:
        return
    for t, v in got.items():
        print("%s: %d/%d | want: %s | most written: %s"
              % (t, exact[t], len(v), body(tasks[t]["reference"]), collections.Counter(v).most_common(2)))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--summary"]
    if len(args) != 1:
        sys.exit(__doc__)
    main(args[0], "--summary" in sys.argv[1:])
