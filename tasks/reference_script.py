"""A task's TorchScript reference (docs/task-format.md) read in Python as LibTorch reads it.

LibTorch's TorchScript compiler, the sandbox's, resolves `torch.X` as the operator aten::X and
knows `inf`, `nan`, `math` and `annotate` without being told. Python's resolves names in Python's
torch module, whose functions differ from the operators in places: some are missing
(torch.linear), some take other arguments (torch.broadcast_tensors takes tensors, not a list;
torch.zeros_like refuses a ScalarType number such as `dtype=6`), and some have other defaults
(torch.triplet_margin_loss reduces nothing where aten's reduces to the mean). Both Python tools
that read references, the KernelBench importer and the compile-baseline measure, read them here.
"""
import functools
import math
import re
import typing

import torch

# torch.X that a Python function calls through another function than torch.ops.aten.X: operators
# TorchScript alone runs (aten::tensor, aten::device), which torch.compile cannot trace and whose
# Python forms are the same functions (`tensor` through python_tensor, which also takes a
# ScalarType number); and the recurrent layers' operators (below).
PYTHON_FORMS = {"tensor": "python_tensor", "device": "torch.device"}

# Recurrent layers' operators, which a Python function calls outside torch.compile's graph: dynamo
# breaks its graph at an nn.RNN, nn.GRU or nn.LSTM module (unless torch._dynamo.config.allow_rnn
# is set), so a KernelBench RNN problem compiled as the field compiles it runs cuDNN's kernels
# eagerly. Traced instead, inductor unrolls aten::lstm into a cell per time step and layer: a
# compile of over 280 s for level 3's 36_LSTMHn (512 steps x 6 layers, one H100, 2026-12-07), and
# a program that is not the field's baseline.
RECURRENT = ("lstm", "gru", "rnn_tanh", "rnn_relu")
PYTHON_FORMS.update({name: "eager_" + name for name in RECURRENT})


@functools.lru_cache(maxsize=None)
def eager_forms():
    """eager_lstm, ...: the recurrent operators, each marked to run outside torch.compile's graph.
    Made on first use: torch._dynamo takes seconds to import, and only the compile measure needs it
    (torch 2.0 on; before it nothing compiles a Python function, and the plain operators serve)."""
    try:
        import torch._dynamo as dynamo
    except ImportError:
        dynamo = None
    forms = {}
    for name in RECURRENT:
        def run(*args, _op=getattr(torch.ops.aten, name), **kwargs):
            return _op(*args, **kwargs)
        run.__name__ = run.__qualname__ = "eager_" + name
        forms[run.__name__] = dynamo.disable(run) if dynamo is not None else run
    return forms


def _scalar_types():
    """ScalarType numbers (as TorchScript prints a dtype: `dtype=6`) to torch dtypes."""
    out = {}
    for n in range(64):
        if n == 8:  # ComplexHalf: making one logs a warning, and no task has it
            continue
        try:
            out[n] = torch.ops.aten.empty([0], dtype=n).dtype
        except (RuntimeError, TypeError):
            pass
    return out


SCALAR_TYPES = _scalar_types()


def python_tensor(data, dtype=None, device=None, requires_grad=False):
    """torch.tensor as TorchScript's aten::tensor takes it: `dtype` a torch dtype or a number."""
    if isinstance(dtype, int):
        dtype = SCALAR_TYPES[dtype]
    return torch.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def required(found, name):
    """`found`, the function `name` looked up in a compiled reference; ValueError where it is None."""
    if found is None:
        raise ValueError("the reference defines no %s" % name)
    return found


def script_function(source, name="forward"):
    """`def name` of `source` compiled as LibTorch compiles a task's reference. Raises ValueError
    where `source` does not define it."""
    names = {"torch": torch.ops.aten, "ops": torch.ops, "annotate": torch.jit.annotate, "math": math,
             "inf": math.inf, "nan": math.nan}
    unit = torch._C.CompilationUnit()
    unit.define(source, names.get)
    return required(unit.find_function(name), name)


def is_operator(name):
    return bool(torch._C._jit_get_schemas_for_operator("aten::" + name))


def python_source(source):
    """`source` with each torch.X that names an aten operator spelled torch.ops.aten.X (but
    PYTHON_FORMS): the operators the TorchScript reference calls, as a Python function calls them.
    Other names (torch.Tensor in an annotation) stay Python's."""
    def resolve(m):
        name = m.group(1)
        if name in PYTHON_FORMS:
            return PYTHON_FORMS[name]
        return "torch.ops.aten." + name if is_operator(name) else m.group(0)
    return re.sub(r"\btorch\.([A-Za-z_][A-Za-z0-9_]*)", resolve, source)


def python_function(source, name="forward"):
    """`def name` of `source` as a plain Python function (for torch.compile to trace), computing
    what script_function's does. Raises ValueError where `source` does not define it."""
    scope = {"torch": torch, "ops": torch.ops, "Tensor": torch.Tensor, "List": typing.List,
             "Optional": typing.Optional, "Tuple": typing.Tuple, "math": math, "inf": math.inf,
             "nan": math.nan, "annotate": lambda _type, value: value, "python_tensor": python_tensor,
             **eager_forms()}
    exec(compile(python_source(source), "<reference>", "exec"), scope)
    return required(scope.get(name), name)
