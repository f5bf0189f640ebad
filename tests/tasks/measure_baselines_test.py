#!/usr/bin/env python3
"""tasks/baselines/measure_baselines.py and `kforge tasks baseline --against compile` on the CPU.

On a tiny task file: eager times at the primary shapes with --eager-only (a reference spelled the
way LibTorch resolves it, torch.linear, runs here too), a task whose reference does not compile
listed with its reason rather than dropped, and on a torch without torch.compile (Debian's 1.13) a
clear refusal with exit 3 and no eager numbers standing in. Where torch has torch.compile, the
compiled time and the check against eager instead. Exits 77 (skipped) where this Python has no
torch.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no torch in %s" % sys.executable)
    sys.exit(77)

GOOD = {"id": "t/linear_relu", "category": "fused", "description": "linear then relu",
        "inputs": [{"name": "x", "shape": [16, 32], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}},
                   {"name": "w", "shape": [8, 32], "dtype": "float32", "init": {"dist": "uniform", "low": -0.2, "high": 0.2}}],
        "outputs": [{"name": "y", "shape": [16, 8], "dtype": "float32"}],
        "reference": "def forward(x, w):\n    return torch.relu(torch.linear(x, w))\n"}
BROKEN = dict(GOOD, id="t/broken", reference="def forward(x, w):\n    return torch.relu(x +)\n")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what)


def write(path, tasks):
    with open(path, "w") as f:
        for t in tasks:
            f.write(json.dumps(t) + "\n")


def lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def run(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    print("$ %s -> %d\n%s" % (" ".join(argv), r.returncode, r.stdout))
    return r


def load_script(script):
    """The measure script as a module, for the checks that call its functions."""
    spec = importlib.util.spec_from_file_location("measure_baselines", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_mismatch(script):
    """The compiled-against-eager comparison, which works in slices of 2^24 elements: a wrong
    element in the last slice, past the first, is found."""
    mod = load_script(script)
    task = {"outputs": [{"dtype": "float32"}], "tolerance": {"atol": 1e-3, "rtol": 0.0}}
    e = torch.zeros((1 << 24) + 7)
    check(mod.mismatch(task, [e], [e.clone()]) is None, "equal outputs match")
    g = e.clone()
    g[-1] = 0.5
    why = mod.mismatch(task, [e], [g]) or ""
    check("max abs error 0.5" in why, "an error in the last slice is found: %r" % why)
    g[-1] = float("nan")
    check("max abs error inf" in (mod.mismatch(task, [e], [g]) or ""), "a NaN is an error")
    check("differs" in (mod.mismatch(task, [e.int()], [g.int()]) or ""), "integers match exactly")


def check_prepared(script):
    """A task whose inputs derive from drawn tensors (draws and prepare): its inputs are prepare's
    result on the draws (a symmetric matrix, a bool mask), and a prepare that returns the wrong dtype
    is refused saying which input."""
    mod = load_script(script)
    task = {"id": "t/derived", "draws": [
                {"name": "d0", "shape": [8, 8], "dtype": "float32", "init": {"dist": "uniform", "low": 0.0, "high": 1.0}},
                {"name": "d1", "shape": [8, 8], "dtype": "int64", "init": {"dist": "randint", "low": 0, "high": 2}}],
            "prepare": "def prepare(d0: Tensor, d1: Tensor) -> Tuple[Tensor, Tensor]:\n"
                       "  return (torch.div(torch.add(d0, torch.numpy_T(d0)), 2), torch.to(d1, 11))\n",
            "inputs": [{"name": "A", "shape": [8, 8], "dtype": "float32"},
                       {"name": "mask", "shape": [8, 8], "dtype": "bool"}]}
    A, mask = mod.make_inputs(task, "smallest", "cpu", 1)
    check(torch.equal(A, A.t()) and mask.dtype == torch.bool, "prepare's inputs: A symmetric, mask bool")
    bad = dict(task, prepare="def prepare(d0: Tensor, d1: Tensor) -> Tuple[Tensor, Tensor]:\n  return (d0, d1)\n")
    try:
        mod.make_inputs(bad, "smallest", "cpu", 1)
        check(False, "a prepare of the wrong dtype is refused")
    except mod.task_error as e:
        check("input mask" in str(e), "the refusal names the input: %s" % e)


# References whose operators Python's torch spells otherwise (tasks/reference_script.py), as the
# KernelBench importer prints them: the Python function torch.compile traces must compute what the
# TorchScript one, eager, does.
SPELLINGS = {
    "a ScalarType number": ("def forward(x) -> Tensor:\n"
                            "  _0 = torch.zeros_like(x, dtype=6, layout=0, device=x.device, pin_memory=False)\n"
                            "  return torch.cat([_0, torch.cumsum(x, 1)], 1)\n", 1),
    "a list of tensors": ("def forward(a, b) -> Tensor:\n"
                          "  _0 = torch.broadcast_tensors([a, b])\n  input, target, = _0\n"
                          "  return torch.smooth_l1_loss(input, target)\n", 2),
    "a default reduction": ("def forward(a, p, n) -> Tensor:\n"
                            "  return torch.triplet_margin_loss(a, p, n)\n", 3),
    "inf": ("def forward(x) -> Tensor:\n  return torch.softmax(torch.masked_fill(x, torch.lt(x, 0), -inf), -1)\n", 1),
    "an operator Python's torch lacks": ("def forward(x, w) -> Tensor:\n"
                                         "  B = torch.tensor(torch.size(x, 0))\n"
                                         "  return torch.view(torch.linear(x, w), [int(B), -1])\n", 2),
    "a constant tensor of a ScalarType number, and a torch type": (
        "def forward(x: torch.Tensor) -> Tensor:\n"
        "  return torch.mul(x, torch.tensor(0.5, dtype=6, device=x.device))\n", 1),
}


def check_python_form(script):
    mod = load_script(script)
    torch.manual_seed(0)
    for what, (source, count) in SPELLINGS.items():
        inputs = [torch.randn(4, 6) for _ in range(count)]
        want = mod.script_function(source)(*inputs)
        try:
            got = mod.as_python(source)(*inputs)
        except Exception as e:
            got = e
        check(isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, equal_nan=True),
              "the Python form of a reference with %s computes what TorchScript does: %s against %s"
              % (what, got if not isinstance(got, torch.Tensor) else list(got.shape), list(want.shape)))


# A 2-layer LSTM as the importer prints nn.LSTM's forward (level 3's 36_LSTMHn, smaller).
LSTM = ("def forward(x, h0, c0, w_ih0, w_hh0, b_ih0, b_hh0, w_ih1, w_hh1, b_ih1, b_hh1) -> Tensor:\n"
        "  _1 = [w_ih0, w_hh0, b_ih0, b_hh0, w_ih1, w_hh1, b_ih1, b_hh1]\n"
        "  out, h, c = torch.lstm(x, [h0, c0], _1, True, 2, 0., False, False, True)\n"
        "  return torch.add(h, torch.sum(out))\n")


def lstm_inputs():
    batch, steps, feat, hidden = 3, 5, 4, 6
    shapes = [(batch, steps, feat), (2, batch, hidden), (2, batch, hidden)]
    for layer_in in (feat, hidden):
        shapes += [(4 * hidden, layer_in), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    return [torch.randn(*s) for s in shapes]


def check_recurrent(script):
    """A recurrent layer's operator runs outside torch.compile's graph, as dynamo leaves nn.LSTM
    modules (tasks/reference_script.py); the Python form computes what TorchScript does."""
    mod = load_script(script)
    torch.manual_seed(0)
    inputs = lstm_inputs()
    want = mod.script_function(LSTM)(*inputs)
    fn = mod.as_python(LSTM)
    got = fn(*inputs)
    check(got.shape == want.shape and torch.allclose(got, want, atol=1e-5),
          "the Python form of an LSTM reference computes what TorchScript does")
    if not hasattr(torch, "compile"):
        print("check_recurrent: torch %s has no torch.compile; the graph is checked where it has" % torch.__version__)
        return
    traced = []

    def backend(gm, _example_inputs):
        traced.extend(str(n.target) for n in gm.graph.nodes)
        return gm.forward
    torch._dynamo.reset()
    got = torch.compile(fn, backend=backend)(*inputs)
    check(torch.allclose(got, want, atol=1e-5), "the compiled LSTM reference computes what TorchScript does")
    check(traced and not any("lstm" in t for t in traced),
          "torch.compile's graphs hold no lstm (they hold: %s)" % sorted(set(traced)))


def check_warmed_first(script):
    """Tasks that warmed (an ok line in a warming pass's file) are measured first, each part in
    file order; a task whose warming failed or was never reached goes last."""
    mod = load_script(script)
    tasks = [{"id": i} for i in ("slow", "a", "failed", "b", "unreached")]
    with tempfile.TemporaryDirectory() as d:
        w1, w2 = os.path.join(d, "w1.jsonl"), os.path.join(d, "w2.jsonl")
        write(w1, [{"id": "b", "ok": True}, {"id": "failed", "ok": False, "error": "took longer"}])
        write(w2, [{"id": "a", "ok": True}])
        got = [t["id"] for t in mod.warmed_first(tasks, [w1, w2])]
        check(got == ["a", "b", "slow", "failed", "unreached"], "warmed tasks first: %s" % got)
        check([t["id"] for t in mod.warmed_first(tasks, [])] == [t["id"] for t in tasks], "no warming files: file order")
        # A warmer stopped mid-line (--warm-time) leaves a cut line: skipped, the rest read.
        with open(w2, "a") as f:
            f.write('{"id": "slow", "o')
        got = [t["id"] for t in mod.warmed_first(tasks, [w1, w2])]
        check(got == ["a", "b", "slow", "failed", "unreached"], "a cut line is skipped: %s" % got)


def check_static_parameters(script):
    """Under the modes that run CUDA graphs the task's parameters are the inputs marked static;
    under the others none is."""
    mod = load_script(script)
    task = dict(GOOD, inputs=[GOOD["inputs"][0], dict(GOOD["inputs"][1], role="parameter")])
    inputs = [torch.zeros(1), torch.zeros(1)]
    for mode in ("max-autotune", "reduce-overhead"):
        got = mod.static_parameters(task, inputs, mode)
        check([n for n, _ in got] == ["w"] and got[0][1] is inputs[1], "%s: the parameter w is static" % mode)
    for mode in ("default", "max-autotune-no-cudagraphs"):
        check(mod.static_parameters(task, inputs, mode) == [], "%s: nothing marked static" % mode)
    check(mod.static_parameters(GOOD, inputs, "max-autotune") == [], "a task without parameters: nothing static")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--kforge", required=True)
    a = ap.parse_args()
    has_compile = hasattr(torch, "compile")
    with tempfile.TemporaryDirectory() as d:
        both, good = os.path.join(d, "both.jsonl"), os.path.join(d, "good.jsonl")
        write(both, [GOOD, BROKEN])
        write(good, [GOOD])
        out = os.path.join(d, "out.jsonl")
        script = [sys.executable, a.script]

        # Eager only: one line per task, the failure with its reason, exit 1 for it.
        r = run(script + [both, "--out", out, "--device", "cpu", "--eager-only", "--trials", "3"])
        check(r.returncode == 1, "a task not measured gives exit 1")
        got = lines(out)
        check(len(got) == 2, "one line per task, the failed one too")
        if len(got) == 2:
            ok, bad = got
            check(ok["ok"] is True and ok["id"] == "t/linear_relu", "the good task is measured")
            check(ok.get("eager_ms", 0) > 0 and ok["trials"] == 3 and ok["device"] == "cpu", "eager time on the cpu")
            check(ok["mode"] is None and "compile_ms" not in ok, "eager-only lines hold no compile time")
            check(ok["torch"] == torch.__version__ and ok["shapes"] == "primary", "torch version and shapes recorded")
            check(bad["ok"] is False and "TorchScript" in bad.get("error", ""), "the broken reference is listed with why")
        check("not measured: t/broken" in r.stdout, "the failure is said on stderr")

        # Bad input: exit 2, saying what.
        r = run(script + [good, "--out", out, "--device", "tpu", "--eager-only"])
        check(r.returncode == 2 and "--device tpu" in r.stdout, "a bad device is refused with exit 2")
        r = run(script + [os.path.join(d, "missing.jsonl"), "--out", out, "--eager-only"])
        check(r.returncode == 2, "a missing task file is refused with exit 2")

        # The kforge command runs the same script through the machine's Python torch.
        kout = os.path.join(d, "kforge.jsonl")
        r = run([a.kforge, "tasks", "baseline", good, "--against", "compile", "--device", "cpu", "--eager-only",
                 "--trials", "3", "--out", kout])
        check(r.returncode == 0 and lines(kout)[0]["ok"] is True, "kforge tasks baseline --against compile --eager-only")
        r = run([a.kforge, "tasks", "baseline", good, "--against", "compile", "--device", "cpu"])
        check(r.returncode == 2 and "--out FILE is required" in r.stdout, "--out is required")
        r = run([a.kforge, "tasks", "baseline", good, "--mode", "max-autotune", "--device", "cpu"])
        check(r.returncode == 2 and "go with --against compile" in r.stdout, "--mode alone is refused")
        r = run([a.kforge, "tasks", "baseline", both, "--against", "compile", "--device", "cpu",
                 "--eager-only", "--out", kout])
        check(r.returncode == 1 and "their lines in" in r.stdout, "kforge says some tasks were not measured")

        if not has_compile:
            # No torch.compile: refused, exit 3, nothing written in compile's place.
            os.remove(out)
            r = run(script + [good, "--out", out, "--device", "cpu"])
            check(r.returncode == 3 and "has no torch.compile" in r.stdout and "--eager-only" in r.stdout,
                  "torch without torch.compile is refused with exit 3, naming --eager-only")
            check(not os.path.exists(out), "and writes no file")
            r = run([a.kforge, "tasks", "baseline", good, "--against", "compile", "--device", "cpu", "--out", kout])
            check(r.returncode == 3 and "no torch.compile" in r.stdout, "kforge passes the refusal on with exit 3")
        else:
            r = run(script + [good, "--out", out, "--device", "cpu", "--trials", "3"])
            got = lines(out)
            check(r.returncode == 0 and got[0]["ok"] is True, "torch.compile measured on the cpu")
            check(got[0].get("compile_ms", 0) > 0 and got[0].get("compile_s", 0) > 0 and got[0]["mode"] == "default",
                  "compile time, compile seconds and mode recorded")
            check("static_inputs" not in got[0], "default mode marks nothing static")
            # A mode with CUDA graphs (skipped on the CPU): the parameter is marked and recorded.
            params = os.path.join(d, "params.jsonl")
            write(params, [dict(GOOD, inputs=[GOOD["inputs"][0], dict(GOOD["inputs"][1], role="parameter")])])
            r = run(script + [params, "--out", out, "--device", "cpu", "--trials", "3", "--mode", "reduce-overhead"])
            got = lines(out)
            check(r.returncode == 0 and got[0]["ok"] is True and got[0].get("static_inputs") == ["w"],
                  "reduce-overhead: the parameter is marked static and the line says so")
    check_mismatch(a.script)
    check_prepared(a.script)
    check_python_form(a.script)
    check_recurrent(a.script)
    check_warmed_first(a.script)
    check_static_parameters(a.script)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed (torch %s, torch.compile %s)" % (torch.__version__, "present" if has_compile else "absent"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
