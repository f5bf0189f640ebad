#!/usr/bin/env python3
"""Times each kforge task's reference eagerly and under torch.compile; one JSON line per task.

For every task of a kforge task file (docs/task-format.md):
  - inputs are drawn at the task's primary shapes (or its smallest with --shapes smallest) with the
    task's dtypes and init distributions, on --device. The values come from torch's generator, not
    kforge's, so they are the same distribution but not the same numbers as the sandbox's;
  - eager is the task's TorchScript reference run as the sandbox runs it (torch.jit, graph
    optimizer off so nothing is fused, TF32 off, no grad);
  - compiled is the same source run as Python, each torch.X the operator torch.ops.aten.X that
    LibTorch resolves it to (tasks/reference_script.py), under torch.compile(fn, mode=--mode);
    its first call, compilation included, is compile_s; under the modes that run CUDA graphs the
    task's parameters are marked static addresses (static_parameters), as a module's are;
  - timing follows the sandbox (docs/sandbox.md): warm-up calls, then rounds that alternate
    eager and compiled trials, the L2 cache flushed before every trial, CUDA events around each
    call, the median of all trials with its quartiles; on the CPU, wall clock without a flush;
  - the compiled outputs must match eager within the task's tolerance, else the line is not ok.
A task that cannot be measured gets a line with "ok": false and the reason; none is dropped.
`kforge tasks baseline --against compile` runs this script (docs/kernelbench.md).

Exit status: 0 every task measured; 1 some task failed; 2 bad input (unreadable task file, no
such device); 3 this torch has no torch.compile (it came in torch 2.0) and --eager-only was not
given: no eager-only numbers are written in its place.
"""
import argparse
import json
import math
import os
import signal
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reference_script import python_function, script_function  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


class task_error(Exception):
    pass


def read_tasks(path):
    """The task file's tasks: JSON Lines, or one object when the name ends in .json."""
    with open(path) as f:
        text = f.read()
    if path.endswith(".json"):
        return [json.loads(text)]
    tasks = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                tasks.append(json.loads(line))
            except ValueError as e:
                raise ValueError("%s:%d: not JSON: %s" % (path, n, e))
    return tasks


def shapes_of(task, which):
    """Input shapes by name: the primary ones, or those of the variant with the fewest elements
    (the rule of smallest_shapes in tasks/task.cpp)."""
    primary = {i["name"]: list(i["shape"]) for i in task["inputs"]}
    if which == "primary":
        return primary
    best, best_n = primary, sum(math.prod(s) for s in primary.values())
    for v in task.get("variants", []):
        shapes = dict(primary, **v)
        n = sum(math.prod(s) for s in shapes.values())
        if n < best_n:
            best, best_n = shapes, n
    return best


def draw(spec, shape, gen, device):
    dtype = DTYPES[spec["dtype"]]
    init = spec["init"]
    dist = init["dist"]
    if dist == "normal":
        t = torch.empty(shape, dtype=torch.float32, device=device).normal_(init["mean"], init["std"], generator=gen)
    elif dist == "uniform":
        t = torch.empty(shape, dtype=torch.float32, device=device).uniform_(init["low"], init["high"], generator=gen)
    elif dist == "randint":
        t = torch.randint(int(init["low"]), int(init["high"]), shape, dtype=torch.int64, device=device, generator=gen)
    elif dist == "constant":
        return torch.full(shape, init["value"], dtype=dtype, device=device)
    else:
        raise task_error("input %s: unknown init %r" % (spec["name"], dist))
    return t.to(dtype)


def make_inputs(task, which, device, seed):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    if "prepare" in task:
        return prepared_inputs(task, gen, device)
    shapes = shapes_of(task, which)
    return [draw(i, shapes[i["name"]], gen, device) for i in task["inputs"]]


def prepared_inputs(task, gen, device):
    """A task whose inputs derive from drawn tensors: its draws drawn, then its TorchScript
    prepare (docs/task-format.md) applied, checked against the inputs it declares. Such a task
    has no shape variants, so the draws' own shapes are the ones to use."""
    draws = [draw(d, list(d["shape"]), gen, device) for d in task["draws"]]
    try:
        prepare = script_function(task["prepare"], "prepare")
    except Exception as e:
        raise task_error("prepare does not compile: %s" % str(e).strip().splitlines()[0])
    with torch.no_grad():
        out = prepare(*draws)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(out) != len(task["inputs"]):
        raise task_error("prepare returned %d tensors for %d inputs" % (len(out), len(task["inputs"])))
    for t, spec in zip(out, task["inputs"]):
        if list(t.shape) != list(spec["shape"]) or t.dtype != DTYPES[spec["dtype"]]:
            raise task_error("prepare made input %s %s %s, the task declares %s %s" % (
                spec["name"], list(t.shape), t.dtype, spec["shape"], spec["dtype"]))
    return [t.contiguous().clone() for t in out]


def as_python(source):
    """The TorchScript reference as a Python function, for torch.compile to trace."""
    try:
        return python_function(source)
    except Exception as e:
        raise task_error("the reference does not run as Python: %s" % e)


def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def tolerance(task):
    if "tolerance" in task:
        return task["tolerance"]["atol"], task["tolerance"]["rtol"]
    half = any(o["dtype"] in ("float16", "bfloat16") for o in task["outputs"])
    return (1e-2, 1e-2) if half else (1e-4, 1e-4)


def mismatch(task, expected, got):
    """Why `got` is not `expected` within the task's tolerance (docs/task-format.md), or None."""
    atol, rtol = tolerance(task)
    if len(got) != len(expected):
        return "%d outputs, eager gave %d" % (len(got), len(expected))
    for k, (e, g) in enumerate(zip(expected, got)):
        if not isinstance(g, torch.Tensor) or g.shape != e.shape or g.dtype != e.dtype:
            return "output %d: %s, eager gave %s %s" % (k, (tuple(g.shape), g.dtype) if isinstance(g, torch.Tensor)
                                                       else type(g).__name__, tuple(e.shape), e.dtype)
        if e.is_floating_point():
            # In slices of 2^24 elements: KernelBench's outputs reach 6 GiB, and the float64
            # temporaries of a whole one would not fit beside the inputs and the two outputs.
            ef_all, gf_all = e.reshape(-1), g.reshape(-1)
            bad, worst = False, 0.0
            for at in range(0, ef_all.numel(), 1 << 24):
                ef, gf = ef_all[at:at + (1 << 24)].double(), gf_all[at:at + (1 << 24)].double()
                err = (gf - ef).abs()
                if bool((~(err <= atol + rtol * ef.abs())).any()):
                    bad, worst = True, max(worst, float(err.nan_to_num(float("inf")).max()))
            if bad:
                return "output %d: max abs error %.3g beyond atol %g + rtol %g" % (k, worst, atol, rtol)
        elif not torch.equal(e, g):
            return "output %d: differs from eager (exact match required)" % k
    return None


class timer:
    """One call timed the sandbox's way: CUDA events with the L2 cache flushed before, or the wall
    clock on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            props = torch.cuda.get_device_properties(device)
            l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
            self.flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, fn, inputs):
        if self.cuda:
            self.flush.zero_()
            torch.cuda.synchronize()
            self.start.record()
            fn(*inputs)
            self.end.record()
            torch.cuda.synchronize()
            return self.start.elapsed_time(self.end)
        t0 = time.perf_counter()
        fn(*inputs)
        return (time.perf_counter() - t0) * 1e3


def quartiles(ms):
    s = sorted(ms)
    at = lambda q: s[int(q * (len(s) - 1) + 0.5)]
    return {"ms": at(0.5), "p25_ms": at(0.25), "p75_ms": at(0.75)}


# The modes that run the compiled code as CUDA graphs. A graph reads its inputs from fixed
# addresses, so each call copies every input there unless the input is known to stay put.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def static_parameters(task, inputs, mode):
    """The inputs to mark as static addresses under the modes that run CUDA graphs: the task's
    parameters (role "parameter", KernelBench's weights), which a graph of KernelBench's own
    module reads in place as it reads a module's parameters. Unmarked, each call copies them (on an
    H100, 2026-12-07, an estimate of copying every input came to 64-106 % of max-autotune's time
    over default's on 13 of 16 GEMM and convolution problems). The problem's own inputs are copied
    as they would be there. Returns (name, tensor) pairs; none for the other modes."""
    if mode not in CUDA_GRAPH_MODES:
        return []
    return [(spec["name"], t) for spec, t in zip(task["inputs"], inputs) if spec.get("role") == "parameter"]


def measure(task, a, device, device_name):
    line = {"id": task.get("id", "?"), "device": device_name, "torch": torch.__version__,
            "mode": None if a.eager_only else a.mode, "shapes": a.shapes}
    inputs = make_inputs(task, a.shapes, device, a.seed)
    try:
        eager = script_function(task["reference"])
    except Exception as e:
        raise task_error("the reference does not compile as TorchScript: %s" % str(e).strip().splitlines()[0])
    clock = timer(device)
    with torch.no_grad():
        expected = as_list(eager(*inputs))
        clock.sync()
        compiled = None
        if not a.eager_only:
            # Every task's forward is a new function of the same name and place; without a reset
            # dynamo counts them as recompiles of one frame and, past its limit (8), runs the rest
            # uncompiled: what an earlier version of this script timed as "compiled" for all
            # tasks after the eighth.
            torch._dynamo.reset()
            static = static_parameters(task, inputs, a.mode)
            if static and not hasattr(torch._dynamo, "mark_static_address"):
                raise task_error("torch %s has no torch._dynamo.mark_static_address (torch >= 2.1): mode %s would "
                                 "copy the task's parameters on every call" % (torch.__version__, a.mode))
            for _, t in static:
                torch._dynamo.mark_static_address(t)
            if a.mode in CUDA_GRAPH_MODES:
                line["static_inputs"] = [name for name, _ in static]
            fn = as_python(task["reference"])
            compiled = torch.compile(fn, mode=None if a.mode == "default" else a.mode)
            t0 = time.perf_counter()
            try:
                got = as_list(compiled(*inputs))
                clock.sync()
            except Exception as e:
                raise task_error("torch.compile failed: %s" % (str(e).strip().splitlines() or [type(e).__name__])[0])
            line["compile_s"] = time.perf_counter() - t0
            bad = mismatch(task, expected, got)
            if bad:
                raise task_error("compiled outputs differ from eager: " + bad)
        for _ in range(a.warmup):
            eager(*inputs)
            if compiled:
                compiled(*inputs)
        clock.sync()
        # As the sandbox times a candidate against eager: rounds that alternate the two, so a
        # drift in clocks or temperature falls on both.
        e_ms, c_ms = [], []
        per_round = max(1, a.trials // a.rounds)
        for _ in range(a.rounds):
            e_ms += [clock.ms(eager, inputs) for _ in range(per_round)]
            if compiled:
                c_ms += [clock.ms(compiled, inputs) for _ in range(per_round)]
    q = quartiles(e_ms)
    line.update(eager_ms=q["ms"], eager_p25_ms=q["p25_ms"], eager_p75_ms=q["p75_ms"], trials=len(e_ms))
    if compiled:
        q = quartiles(c_ms)
        line.update(compile_ms=q["ms"], compile_p25_ms=q["p25_ms"], compile_p75_ms=q["p75_ms"])
    line["ok"] = True
    return line


def warmed_first(tasks, warmed_files):
    """`tasks` with those that have an ok line in `warmed_files` first, each part in file order. A
    task whose compile failed or ran out of time while warming would most likely do so again, and
    first in line it would hold up every task after it."""
    if not warmed_files:
        return tasks
    ok = set()
    for path in warmed_files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    m = json.loads(line) if line.strip() else {}
                except ValueError:  # a warmer stopped mid-line (--warm-time): that task did not warm
                    print("measure_baselines: %s:%d: not a JSON line, skipped" % (path, n), file=sys.stderr)
                    continue
                if isinstance(m, dict) and m.get("ok") is True:
                    ok.add(m.get("id"))
    return [t for t in tasks if t.get("id") in ok] + [t for t in tasks if t.get("id") not in ok]


def too_long(signum, frame):
    raise task_error("took longer than --time-limit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks", help="kforge task file (JSON Lines, or one task in a .json)")
    ap.add_argument("--out", required=True, help="JSON Lines file of the measurements")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--mode", default="default", choices=MODES, help="torch.compile mode (default: default)")
    ap.add_argument("--eager-only", action="store_true", help="time eager alone (any torch)")
    ap.add_argument("--shapes", default="primary", choices=["primary", "smallest"],
                    help="primary (default: the shapes the sandbox times) or smallest (a quick check)")
    ap.add_argument("--trials", type=int, default=30, help="timed trials of each (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds the trials alternate in (default 3)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls after compiling (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="input seed (default 1)")
    ap.add_argument("--time-limit", type=int, default=900, help="seconds per task, compile included (default 900)")
    ap.add_argument("--warmed", nargs="*", default=[],
                    help="measure lines of an earlier pass (a cache warming): the tasks ok there go first, "
                         "so a run cut short has measured what compiles before what did not")
    a = ap.parse_args()
    if a.trials < 1 or a.rounds < 1 or a.warmup < 0 or a.time_limit < 1:
        ap.error("--trials, --rounds and --time-limit must be >= 1, --warmup >= 0")
    if not a.eager_only and not hasattr(torch, "compile"):
        print("measure_baselines: torch %s has no torch.compile (it came in torch 2.0): no compile "
              "baseline can be measured with it. Use a Python with torch >= 2.0 (KFORGE_PYTHON), or "
              "--eager-only to time eager alone." % torch.__version__, file=sys.stderr)
        return 3
    try:
        device = torch.device(a.device)
    except RuntimeError as e:
        print("measure_baselines: --device %s: %s" % (a.device, e), file=sys.stderr)
        return 2
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("measure_baselines: --device %s: no CUDA device visible to torch %s" % (a.device, torch.__version__),
                  file=sys.stderr)
            return 2
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
        # The sandbox's reference multiplies matrices without TF32 (tasks/reference.cpp); compiled code must too.
        torch.backends.cuda.matmul.allow_tf32 = False
        # Convolutions: a traced reference passes allow_tf32=True to torch._convolution (torch's
        # default for cuDNN), which wins over the sandbox's global switch, so its eager convs use
        # TF32; inductor's convs follow the global switch, left on here for the same arithmetic.
        # (Off, compiled convs ran in full fp32 and measured 2-9x slower than eager, H100, 2026-12-06.)
        torch.backends.cudnn.allow_tf32 = True
    elif device.type == "cpu":
        device_name = "cpu"
    else:
        print("measure_baselines: --device %s: expected cuda, cuda:N or cpu" % a.device, file=sys.stderr)
        return 2
    try:
        tasks = warmed_first(read_tasks(a.tasks), a.warmed)
    except (OSError, ValueError) as e:
        print("measure_baselines: %s" % e, file=sys.stderr)
        return 2
    # As the sandbox runs references: no fusion by the TorchScript executor.
    torch._C._set_graph_executor_optimize(False)
    if hasattr(torch, "_dynamo") and hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
        # A task that dynamo gives up on must fail, not be timed as compiled while running eager.
        torch._dynamo.config.fail_on_recompile_limit_hit = True
    signal.signal(signal.SIGALRM, too_long)
    failed = 0
    with open(a.out, "w") as out:
        for task in tasks:
            tid = task.get("id", "?")
            print("measuring %s" % tid, file=sys.stderr, flush=True)
            signal.alarm(a.time_limit)
            try:
                line = measure(task, a, device, device_name)
            except task_error as e:
                line = {"id": tid, "device": device_name, "torch": torch.__version__,
                        "mode": None if a.eager_only else a.mode, "shapes": a.shapes, "ok": False, "error": str(e)}
            except Exception as e:  # a task's own failure (bad field, out of memory): listed, never dropped
                line = {"id": tid, "device": device_name, "torch": torch.__version__,
                        "mode": None if a.eager_only else a.mode, "shapes": a.shapes, "ok": False,
                        "error": "%s: %s" % (type(e).__name__, (str(e).strip().splitlines() or [""])[0])}
                traceback.print_exc(file=sys.stderr)
            finally:
                signal.alarm(0)
            if not line["ok"]:
                failed += 1
                print("not measured: %s: %s" % (tid, line["error"]), file=sys.stderr)
            out.write(json.dumps(line) + "\n")
            out.flush()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    what = "eager" if a.eager_only else "eager and torch.compile (mode %s)" % a.mode
    print("measured %d of %d task(s), %s, on %s with torch %s, into %s" % (
        len(tasks) - failed, len(tasks), what, device_name, torch.__version__, a.out), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
