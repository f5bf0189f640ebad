#!/usr/bin/env python3
"""tasks/kernelbench/import_kernelbench.py's rewrite of the printed forms torch 2.x's TorchScript
compiler does not read back (the traces of KernelBench's 92_cumsum_exclusive and
31_Conv2d_Min_Add_Multiply as torch 2.11 printed them); the result compiles as TorchScript. And its
derivation of inputs computed from drawn tensors: the traced prepare, applied to draws, gives what
get_inputs gives on them; a derivation that depends on the drawn values is refused. And the
printing of a trace: its number constants where the printer puts them (an attention's head count
and scale), a tensor made inside forward, and the check that refuses a printed reference computing
other numbers than its trace."""
import importlib.util
import re
import sys
import warnings

try:
    import torch
except ImportError:
    print("skipped: this Python has no torch")
    sys.exit(77)

spec = importlib.util.spec_from_file_location("import_kernelbench", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def refused(what, call, reason):
    """1 (a failure) unless call() raises the importer's refusal with `reason` in it."""
    try:
        call()
    except mod.unsupported as e:
        if reason in str(e):
            return 0
        print("FAILED: %s: refused for another reason: %s" % (what, e))
        return 1
    print("FAILED: %s was accepted" % what)
    return 1


CUMSUM = """def forward(x) -> Tensor:
  _0 = ops.prim.NumToTensor(torch.select(x, 1, 0).numel())
  _1 = torch.narrow(x, 1, 0, int(torch.sub(_0, 1)))
  return torch.cumsum(_1, 1)
"""
MIN = """def forward(x, bias) -> Tensor:
  _0 = torch.to(0.5, x.device, 6)
  x1 = torch.min(x, torch.detach(_0))
  return torch.add(x1, bias)
"""
failures = 0
for name, src, absent in (("cumsum", CUMSUM, "ops.prim"), ("min", MIN, "torch.to(")):
    code = mod.readable(src)
    if absent in code:
        print("FAILED: %s: %r left in %s" % (name, absent, code))
        failures += 1
        continue
    try:
        torch.jit.CompilationUnit(code)
    except Exception as e:
        print("FAILED: %s: does not compile as TorchScript: %s\n%s" % (name, str(e).splitlines()[0], code))
        failures += 1
x = torch.arange(12.0).reshape(3, 4)
got = torch.jit.CompilationUnit(mod.readable(MIN)).forward(x, torch.ones(3, 4))
if not torch.equal(got, torch.minimum(x, torch.tensor(0.5)) + 1):
    print("FAILED: the rewritten min computes %s" % got)
    failures += 1


class problem:
    """get_inputs of KernelBench's 13, 93 and 100 in one, with torch's factories as the importer
    patches them."""
    @staticmethod
    def get_inputs():
        A = torch.rand(8, 8)
        x = torch.rand(4, 8)
        mask = torch.randint(0, 2, x.shape).bool()
        scale = torch.rand(())
        y = torch.randint(0, 2, (4,)).float() * 2 - 1
        return [(A + A.T) / 2, torch.triu(x) * scale, mask, y]


class data_dependent:
    @staticmethod
    def get_inputs():
        A = torch.rand(8, 8)
        return [A * 2 if float(A.sum()) > 0 else A]


with mod.recorded_inputs() as rec:
    problem.get_inputs()
draws, prepare = mod.derivation(problem, rec)
if [d["name"] for d in draws] != ["d0", "d1", "d2", "d3", "d4"] or draws[2]["init"] != {"dist": "randint", "low": 0, "high": 2}:
    print("FAILED: draws %s" % draws)
    failures += 1
real = [torch.rand(8, 8), torch.rand(4, 8), torch.randint(0, 2, (4, 8)), torch.rand(()), torch.randint(0, 2, (4,))]
with mod.recorded_inputs(replay=real, like=[(tuple(t.shape), t.dtype) for t in real]):
    want = problem.get_inputs()
# Compiled as LibTorch compiles it (torch.to and torch.numpy_T are aten's only).
got = mod.script_function(prepare, "prepare")(*real)
if len(got) != 4 or not all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)):
    print("FAILED: prepare gives other inputs than get_inputs:\n%s" % prepare)
    failures += 1
with mod.recorded_inputs() as rec:
    try:
        data_dependent.get_inputs()
    except Exception:
        pass  # a meta tensor has no value: only the derivation's refusal is checked
rec.drawn = rec.drawn[:1]
failures += refused("a derivation that branches on drawn values", lambda: mod.derivation(data_dependent, rec),
                    "does not trace")


class attend(torch.nn.Module):
    """Self-attention as KernelBench's level 3 VisionAttention has it: its trace holds the head count
    and the scale as 0-d tensor constants, which the printer names in its own order (read in node
    order, they came out swapped)."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(32, 4)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


torch.manual_seed(0)
model = attend().eval()
x = torch.rand(8, 2, 32)
code, order, out = mod.lower(model, [x])
state = mod.named_state(model)
try:
    mod.check_reference(code, [x], [state[k] for k in order], out)
    with torch.no_grad():
        if not torch.allclose(mod.script_function(code)(x, *[state[k] for k in order]), model(x), atol=1e-5):
            raise mod.unsupported("the printed attention differs from the module")
except mod.unsupported as e:
    print("FAILED: the printed attention: %s\n%s" % (e, code))
    failures += 1
# A reference that computes other numbers than its trace is refused.
doubled = re.sub(r"return (\w+)", r"return torch.mul(\1, 2.0)", code)
failures += refused("a reference computing twice its trace",
                    lambda: mod.check_reference(doubled, [x], [state[k] for k in order], out), "other numbers")


class clamp_below(torch.nn.Module):
    """KernelBench's level 2 31_Conv2d_Min_Add_Multiply: torch.tensor(0.5) inside forward traces as
    aten::to of a tensor constant, an op with no form taking a number there."""

    def forward(self, x):
        return torch.min(x, torch.tensor(0.5)) * 2.0


with warnings.catch_warnings():
    warnings.simplefilter("ignore", torch.jit.TracerWarning)
    x = torch.rand(4, 8)
    code, order, out = mod.lower(clamp_below(), [x])
try:
    mod.check_reference(code, [x], [], out)
    if not torch.equal(mod.script_function(code)(x), torch.clamp(x, max=0.5) * 2.0):
        raise mod.unsupported("it computes other numbers")
except mod.unsupported as e:
    print("FAILED: the printed min with a tensor made in forward: %s\n%s" % (e, code))
    failures += 1
print("%d failure(s)" % failures if failures else "all checks passed")
sys.exit(1 if failures else 0)
