#!/usr/bin/env python3
"""How often a policy's samples restate their task's reference, and write its ops (kforge-tiny's diagnostic).

The corpus's explanations open with "The reference computes `<forward's body, lines joined by
'; '>`." (corpus/kernel_writer.cpp), so a model that reads the prompt copies that body; one that
does not writes another op there and its kernel follows that op. Counting exact restatements
separates "cannot read the prompt" from "reads it but writes a wrong kernel".

Map kernels compute the task's ops in one device function, kf_op (corpus/emit_common.cpp). With
--writer DIR (`kforge corpus build --tasks <the same tasks> --out DIR`), a sample's kf_op is compared
with the writer's for its task, its value names (v1, v2, ...) renumbered in order of appearance:
a restated reference with another kf_op is a model that read the op and did not write it
(kforge-tiny v7). With --verdicts FILE (`kforge eval --out`), each task's line adds its verdicts.

Usage: deploy/tiny_restatement.py [--summary] [--writer DIR] [--verdicts FILE] SAMPLES_DIR
(kforge sample's --out: tasks.jsonl, samples.jsonl). Prints the totals, then (without --summary)
per task the wanted body and the two most common restatements.
"""
import argparse
import collections
import glob
import json
import os
import re


def body(reference):
    out, started = [], False
    for line in reference.split("\n"):
        if line.startswith("def forward"):
            started = True
            continue
        if started and line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return "; ".join(out)


def kf_op(source):
    """kf_op's parameters and statements, value names renumbered and spaces squeezed; None if absent."""
    m = re.search(r"void kf_op\((.*?)\)\s*\{(.*?)\n\}", source or "", re.S)
    if not m:
        return None
    text = " ".join((m.group(1) + " {" + m.group(2)).split())
    names = {}
    return re.sub(r"\bv\d+\b", lambda v: names.setdefault(v.group(0), "v%d" % len(names)), text)


def last_cuda_block(completion):
    blocks = re.findall(r"```cuda\n(.*?)```", completion, re.S)
    return blocks[-1] if blocks else completion


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("samples")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--writer")
    ap.add_argument("--verdicts")
    a = ap.parse_args()
    tasks = {}
    with open(os.path.join(a.samples, "tasks.jsonl")) as f:
        for line in f:
            t = json.loads(line)
            tasks[t["id"]] = t
    got, ops = collections.defaultdict(list), collections.defaultdict(list)
    with open(os.path.join(a.samples, "samples.jsonl")) as f:
        for line in f:
            s = json.loads(line)
            m = re.match(r"The reference computes `(.*?)`\. ", s.get("completion", ""))
            got[s["task_id"]].append(m.group(1) if m else "(none)")
            ops[s["task_id"]].append(kf_op(last_cuda_block(s.get("completion", ""))))
    exact = {t: sum(g == body(tasks[t]["reference"]) for g in v) for t, v in got.items()}
    print("restated exactly: %d of %d samples; tasks with at least one: %d of %d"
          % (sum(exact.values()), sum(len(v) for v in got.values()), sum(1 for n in exact.values() if n), len(got)))
    same_op = {}
    if a.writer:
        want = {}
        for t in got:
            files = sorted(glob.glob(os.path.join(a.writer, "kernels", t, "*.cu")))
            want[t] = kf_op(open(files[0]).read()) if files else None
        mapped = [t for t in got if want[t]]
        same_op = {t: sum(o == want[t] for o in ops[t]) for t in mapped}
        print("kf_op as the writer's: %d of %d samples of the %d map tasks; tasks with at least one: %d"
              % (sum(same_op.values()), sum(len(ops[t]) for t in mapped), len(mapped),
                 sum(1 for n in same_op.values() if n)))
    verdicts = collections.defaultdict(collections.Counter)
    if a.verdicts:
        with open(a.verdicts) as f:
            for line in f:
                v = json.loads(line)
                verdicts[v["task"]][v["status"]] += 1
    if a.summary:
        return
    for t, v in got.items():
        extra = ""
        if t in same_op:
            extra += " | kf_op as the writer's: %d/%d" % (same_op[t], len(v))
        if t in verdicts:
            extra += " | verdicts: %s" % dict(verdicts[t])
        print("%s: %d/%d | want: %s | most written: %s%s"
              % (t, exact[t], len(v), body(tasks[t]["reference"]), collections.Counter(v).most_common(2), extra))


if __name__ == "__main__":
    main()
