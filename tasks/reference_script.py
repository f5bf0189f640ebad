"""A task's TorchScript reference (docs/task-format.md) read in Python as LibTorch reads it.

LibTorch's TorchScript compiler, the sandbox's, resolves `torch.X` as the operator aten::X and
knows `inf`, `nan`, `math` and `annotate` without being told. Python's resolves names in Python's
torch module, whose functions differ from the operators in places: some are missing
(torch.linear), some take other arguments (torch.broadcast_tensors takes tensors, not a list;
torch.zeros_like refuses a ScalarType number such as `dtype=6`), and some have other defaults
(torch.triplet_margin_loss reduces nothing where aten's reduces to the mean). Both Python tools
that read references, the KernelBench importer and the compile-baseline measure, read them here.
"""
import math
import re
import typing

import torch

# torch.X that stays Python's in a Python function: aten::tensor is a TorchScript-only operator,
# which torch.compile cannot trace, and Python's torch.tensor is the same function.
PYTHON_FORMS = {"tensor"}


def script_function(source, name="forward"):
    """`def name` of `source` compiled as LibTorch compiles a task's reference."""
    names = {"torch": torch.ops.aten, "ops": torch.ops, "annotate": torch.jit.annotate, "math": math,
             "inf": math.inf, "nan": math.nan}
    unit = torch._C.CompilationUnit()
    unit.define(source, names.get)
    return unit.find_function(name)


def python_source(source):
    """`source` with every torch.X spelled torch.ops.aten.X (but PYTHON_FORMS): the operators the
    TorchScript reference calls, as a Python function calls them."""
    def resolve(m):
        return m.group(0) if m.group(1) in PYTHON_FORMS else "torch.ops.aten." + m.group(1)
    return re.sub(r"\btorch\.([A-Za-z_][A-Za-z0-9_]*)", resolve, source)


def python_function(source, name="forward"):
    """`def name` of `source` as a plain Python function (for torch.compile to trace), computing
    what script_function's does. Raises ValueError where `source` does not define it."""
    scope = {"torch": torch, "ops": torch.ops, "Tensor": torch.Tensor, "List": typing.List,
             "Optional": typing.Optional, "Tuple": typing.Tuple, "math": math, "inf": math.inf,
             "nan": math.nan, "annotate": lambda _type, value: value}
    exec(compile(python_source(source), "<reference>", "exec"), scope)
    if name not in scope:
        raise ValueError("the reference defines no %s" % name)
    return scope[name]
