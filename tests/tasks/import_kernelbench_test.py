#!/usr/bin/env python3
"""tasks/kernelbench/import_kernelbench.py's rewrite of the printed forms torch 2.x's TorchScript
compiler does not read back (the traces of KernelBench's 92_cumsum_exclusive and
31_Conv2d_Min_Add_Multiply as torch 2.11 printed them); the result compiles as TorchScript."""
import importlib.util
import sys

try:
    import torch
except ImportError:
    print("skipped: this Python has no torch")
    sys.exit(77)

spec = importlib.util.spec_from_file_location("import_kernelbench", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

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
print("%d failure(s)" % failures if failures else "all checks passed")
sys.exit(1 if failures else 0)
