#!/usr/bin/env python3
"""KernelBench problem files -> kforge tasks (docs/task-format.md), one JSON line each.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. For each:
  - the module is built as `Model(*get_init_inputs())` on the CPU; its parameters and buffers
    become task inputs after the problem's own inputs, marked "role": "parameter", each with an
    init spec read off the values the module's own initialisation drew (constant, uniform over
    their range, or normal with their mean and std), so every check draws fresh weights of the
    same kind;
  - `get_inputs()` runs with torch's random factories recording what each input is drawn from
    (randn: normal(0, 1), rand: uniform [0, 1), randint: its range) and returning meta tensors,
    so no input of the full size is ever allocated; where get_inputs computes inputs from what it
    drew ((A + A.T) / 2, a mask), the draws become the task's draws and the computation, traced,
    its prepare;
  - the forward, with the parameters passed in, is traced on meta tensors into TorchScript, the
    task's reference; the outputs' shapes and dtypes come from that trace.
A problem that cannot be converted is reported with the reason on stderr (and in --failures as JSON
lines); nothing is dropped silently. Python torch (Debian's 1.13 or a GPU host's 2.x) does the work;
`kforge tasks import-kernelbench` runs this script, and `kforge tasks validate` checks its output.

--scale F divides the problem's size globals (every module-level int >= 256, and such ints in
tuples, except kernel_size, stride, padding, dilation, groups and the like) by F, for a quick check
on a small machine; the tasks then say so in their description and provenance.
"""
import argparse
import concurrent.futures
import importlib.util
import inspect
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from reference_script import script_function  # noqa: E402

KEEP_AS_IS = {"kernel_size", "stride", "padding", "dilation", "groups", "output_padding", "num_groups",
              "num_heads", "heads", "n_heads", "num_classes", "dim_head", "head_dim"}
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int32: "int32", torch.int64: "int64", torch.bool: "bool"}


class unsupported(Exception):
    pass


def problem_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, files in sorted(os.walk(p)):
                for f in sorted(files, key=lambda n: (int(n.split("_")[0]) if n.split("_")[0].isdigit() else 1 << 30, n)):
                    if f.endswith(".py"):
                        yield os.path.join(root, f)
        else:
            yield p


def level_of(path):
    m = re.search(r"level(\d+)", path)
    return int(m.group(1)) if m else 0


def task_id(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).strip("_") or "problem"
    return "kb/l%d/%s" % (level_of(path), stem)


def load_module(path, scale):
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # a syntax error or import failure is the problem's
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise unsupported("no %s in the file" % name)
    if scale > 1:
        for name, value in list(vars(mod).items()):
            if name.startswith("_") or name in KEEP_AS_IS:
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value >= 256:
                setattr(mod, name, max(1, value // scale))
            elif isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
                setattr(mod, name, tuple(max(1, v // scale) if v >= 256 else v for v in value))
    return mod


class recorded_inputs:
    """torch's random factories, patched while get_inputs runs: each returns a meta tensor and
    records the distribution it stands for, in call order (`drawn`). Given `replay` (tensors, one
    per factory call in the recorded order), the factories return those instead, so get_inputs
    becomes a function of them that torch.jit.trace can capture."""

    def __init__(self, replay=None, like=None):
        self.specs = {}
        self.drawn = []
        # `like`: (shape, dtype) of each recorded draw, which the replayed calls must ask for (the
        # replayed tensors' own sizes are traced values, not numbers, while tracing).
        self.replay = list(zip(replay, like)) if replay is not None else None

    def _shape(self, size):
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        return tuple(int(s) for s in size)

    def _make(self, init, size, kw):
        dtype = kw.get("dtype") or torch.get_default_dtype()
        if self.replay is not None:
            # A size read off a traced tensor (randint(0, 2, x.shape)) is a traced value; reading it
            # as a number only checks the call, the replayed draw takes its place in the trace.
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                shape = self._shape(size)
        else:
            shape = self._shape(size)
        if self.replay is not None:
            if not self.replay:
                raise unsupported("get_inputs draws more tensors the second time it runs")
            t, was = self.replay.pop(0)
            if was != (shape, dtype):
                raise unsupported("get_inputs draws other tensors the second time it runs")
            return t
        t = self.saved["empty"](shape, dtype=dtype, device="meta")
        self.specs[id(t)] = init
        self.drawn.append(t)
        return t

    def __enter__(self):
        self.saved = {n: getattr(torch, n) for n in ("randn", "rand", "randint", "zeros", "ones", "empty")}
        rec = self

        def randn(*size, **kw):
            return rec._make({"dist": "normal", "mean": 0.0, "std": 1.0}, size, kw)

        def rand(*size, **kw):
            return rec._make({"dist": "uniform", "low": 0.0, "high": 1.0}, size, kw)

        def randint(*args, **kw):
            low, high, size = (0, args[0], args[1]) if len(args) == 2 else (args[0], args[1], args[2])
            kw.setdefault("dtype", torch.int64)
            return rec._make({"dist": "randint", "low": int(low), "high": int(high)}, (size,), kw)

        def zeros(*size, **kw):
            return rec._make({"dist": "constant", "value": 0}, size, kw)

        def ones(*size, **kw):
            return rec._make({"dist": "constant", "value": 1}, size, kw)

        def empty(*size, **kw):
            raise unsupported("get_inputs uses torch.empty (no distribution to draw from)")

        for n, f in (("randn", randn), ("rand", rand), ("randint", randint), ("zeros", zeros),
                     ("ones", ones), ("empty", empty)):
            setattr(torch, n, f)
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch, n, f)


def init_of_values(t):
    """The init spec a parameter's own values suggest: constant, uniform over [min, max], or normal."""
    if t.dtype not in DTYPES:
        raise unsupported("a parameter of dtype %s" % t.dtype)
    if t.numel() == 0:
        return {"dist": "constant", "value": 0}
    if not t.is_floating_point():
        lo, hi = int(t.min()), int(t.max())
        return {"dist": "constant", "value": lo} if lo == hi else {"dist": "randint", "low": lo, "high": hi + 1}
    f = t.detach().double().flatten()
    lo, hi = float(f.min()), float(f.max())
    if lo == hi:
        return {"dist": "constant", "value": lo}
    mean, std = float(f.mean()), float(f.std()) if f.numel() > 1 else 0.0
    # A uniform draw's std is its range / sqrt(12); a normal's range spans many stds.
    if std > 0 and abs(std - (hi - lo) / math.sqrt(12)) <= 0.05 * std:
        return {"dist": "uniform", "low": lo, "high": hi}
    return {"dist": "normal", "mean": mean, "std": std if std > 0 else 1e-6}


def sanitize(name, taken):
    n = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not n or n[0].isdigit():
        n = "p_" + n
    base, k = n, 1
    while n in taken:
        k += 1
        n = "%s_%d" % (base, k)
    taken.add(n)
    return n


def category_of(path, level):
    s = os.path.basename(path).lower()
    if level >= 2:
        return "fused"
    # A matrix times a number is element-wise, not a matrix product.
    for words, cat in ((("conv",), "conv"), (("scalar_multiplication",), "elementwise"),
                       (("matmul", "gemm", "linear", "matrix"), "gemm"),
                       (("norm",), "normalization"),
                       (("sum", "mean", "max", "min", "argm", "prod", "softmax", "cumsum", "cumprod", "loss", "reduction"), "reduction"),
                       (("relu", "gelu", "sigmoid", "tanh", "swish", "elu", "selu", "softplus", "softsign", "hardtanh", "hardsigmoid"), "elementwise")):
        if any(w in s for w in words):
            return cat
    return "other"


RANDOM_OPS = r"torch\.(randn|rand|randint|randperm|bernoulli|normal|multinomial|poisson|uniform_|normal_|random_|exponential_)\b"


def derivation(mod, rec):
    """For get_inputs() whose inputs are computed from drawn tensors ((A + A.T) / 2, triu, a mask
    made with .bool(), a draw times a drawn scale): the draws, in call order, as task draws d0, d1,
    ... and the computation as TorchScript source of `def prepare(d0, d1, ...)`, traced by running
    get_inputs() again with the factories returning the trace's own arguments. A derivation that
    depends on the drawn values (a Python branch or loop on them, .item()) is refused: its trace
    would hold one draw's outcome."""
    names = ["d%d" % k for k in range(len(rec.drawn))]
    if not names:
        raise unsupported("an input is not drawn by torch.randn/rand/randint/zeros/ones")

    like = [(tuple(t.shape), t.dtype) for t in rec.drawn]

    def replay(*given):
        with recorded_inputs(replay=given, like=like):
            out = mod.get_inputs()
        return tuple(out)
    # A function with one named parameter per draw: the trace names its arguments after them.
    scope = {"replay": replay, "__name__": "kernelbench_inputs"}
    exec("def prepare(%s):\n    return replay(%s)\n" % (", ".join(names), ", ".join(names)), scope)
    import warnings
    with warnings.catch_warnings():
        # TracerWarning: a value turned into a Python number or bool, or a shape assumed constant.
        warnings.simplefilter("error", torch.jit.TracerWarning)
        try:
            traced = torch.jit.trace(scope["prepare"], tuple(rec.drawn), check_trace=False)
        except unsupported:
            raise
        except Exception as e:
            raise unsupported("the inputs derive from drawn tensors in a way that does not trace (%s)"
                              % str(e).strip().splitlines()[0][:200])
    code = printed(traced.graph, "prepare")
    m = re.match(r"\s*def prepare\(([^)]*)\)", code)
    args = [a.split(":")[0].strip() for a in m.group(1).split(",") if a.strip()] if m else []
    if args != names:
        raise unsupported("the traced derivation of the inputs takes %s, not the draws %s" % (args, names))
    if "meta" in code or "CONSTANTS" in code:
        raise unsupported("the derivation of the inputs holds constants the task cannot")
    if re.search(RANDOM_OPS, code):
        raise unsupported("the inputs draw random numbers other than by torch.randn/rand/randint/zeros/ones")
    draws = []
    for name, t in zip(names, rec.drawn):
        if t.dtype not in DTYPES:
            raise unsupported("a draw of dtype %s" % t.dtype)
        draws.append({"name": name, "shape": list(t.shape), "dtype": DTYPES[t.dtype], "init": rec.specs[id(t)]})
    return draws, code.strip() + "\n"


def stand_in_init(t):
    """An init for an input computed by prepare, where the forward is traced on small real tensors:
    only its shape and dtype matter there."""
    if t.is_floating_point():
        return {"dist": "uniform", "low": 0.0, "high": 1.0}
    return {"dist": "randint", "low": 0, "high": 2}


def describe(mod, path, scale, numbers=""):
    doc = (mod.Model.__doc__ or "").strip().splitlines()
    first = doc[0].strip() if doc else "KernelBench problem %s." % os.path.basename(path)
    if numbers:
        first += " (%s, fixed by the problem)" % numbers
    if scale > 1:
        first += " (sizes divided by %d for a quick check)" % scale
    return first[:300]


def forward_names(model, count):
    """The names of the forward's first `count` parameters (the problem's own module's), "x<i>"
    where it has no signature to read them from."""
    try:
        names = list(inspect.signature(own_module(model).forward).parameters)[:count]
    except (TypeError, ValueError):
        names = []
    return names + ["x%d" % i for i in range(len(names), count)]


def lower(model, example):
    """The forward traced on `example`'s device, with the module's parameters and buffers lifted out
    of the graph into arguments after the inputs: (code, the lifted names in argument order, the
    forward's result)."""
    device = example[0].device if example else torch.device("cpu")
    model.to(device)
    by_id = {id(v): k for k, v in named_state(model).items()}
    with torch.no_grad():
        try:
            traced = torch.jit.trace(model, tuple(example), check_trace=False)
        except Exception as e:  # control flow on values, an unsupported op, ...
            raise unsupported("tracing the forward failed: %s" % str(e).strip().splitlines()[0][:300])
        out = traced(*example)
    graph, lifted = torch._C._jit_pass_lower_graph(traced.graph, traced._c)
    order = [by_id.get(id(p)) for p in lifted]
    if None in order:
        raise unsupported("the trace holds a tensor that is neither an input nor a parameter")
    return printed(graph, "forward"), order, out


def readable(code):
    """The trace's code with the forms torch 2.x's printer writes and TorchScript's compiler does not
    read back (torch 2.11: `undefined value ops`, `Arguments for call are not valid`) spelled as it
    reads them: a size made a tensor (ops.prim.NumToTensor(n)) as torch.tensor(n), and a Python
    number made a tensor on a device (torch.to(0.5, x.device, 6)) as torch.tensor(0.5, dtype=6,
    device=x.device); and floats in their shortest form."""
    code = code.replace("ops.prim.NumToTensor(", "torch.tensor(")
    code = re.sub(r"torch\.to\(([-+0-9.e]+), ([\w.]+), (\d+)\)", r"torch.tensor(\1, dtype=\3, device=\2)", code)
    # A float as the shortest decimal that reads back as the same double (the printer writes 17
    # digits: 3.1400000000000001 for the problem's 3.14).
    def shortest(m):
        short = repr(float(m.group(1)))
        return short if len(short) < len(m.group(1)) else m.group(1)
    return re.sub(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)(?![\w.])", shortest, code)


def printed(graph, name):
    """`graph` as TorchScript source of `def name(...)`, its 0-d tensor constants (x * 2.0 traces one)
    written as numbers where they are used. They are made number constants in the graph itself
    before printing: the printer names tensor constants CONSTANTS.c0, c1, ... in the order it first
    prints them, sharing one name among equal tensors, which is neither node order nor one per
    node (read by node order, level 3's VisionAttention got its head count and its scale swapped).
    A constant that is not a number (a tensor of elements, a meta tensor) stays CONSTANTS.cK, which
    the callers refuse."""
    for n in list(graph.nodes()):
        if n.kind() != "prim::Constant" or n.output().type().kind() != "TensorType":
            continue
        value = n.t("value")
        if value.dim() != 0 or value.device.type == "meta":
            continue
        with graph.insert_point_guard(n):
            number = graph.insertConstant(float(value) if value.is_floating_point() else int(value))
        as_tensor = None
        for use in list(n.output().uses()):
            user, k = use.user, use.offset
            user.replaceInput(k, number)
            if user.kind().startswith("aten::") and has_schema(user):
                continue
            # An op with no form taking a number there (aten::to of a tensor made with torch.tensor):
            # the number made a tensor, printed as torch.tensor(...).
            if as_tensor is None:
                with graph.insert_point_guard(n):
                    as_tensor = graph.insertNode(graph.create("prim::NumToTensor", [number])).output()
                as_tensor.setType(n.output().type())
            user.replaceInput(k, as_tensor)
        n.destroy()
    return readable(torch._C._create_function_from_graph(name, graph).code)


def has_schema(node):
    """Whether the node's op has a form for its inputs' types (torch's printer needs one)."""
    try:
        return node.schema() != "(no schema)"
    except RuntimeError:
        return False


def materialize(meta, init, first_dim=None):
    """A real CPU tensor of `meta`'s shape (its first dimension `first_dim` when given) and dtype,
    drawn as `init` says."""
    shape = list(meta.shape)
    if first_dim is not None and shape:
        shape[0] = min(shape[0], first_dim)
    t = torch.empty(shape, dtype=meta.dtype)
    d = init["dist"]
    if d == "normal":
        return t.normal_(init["mean"], init["std"])
    if d == "uniform":
        return t.uniform_(init["low"], init["high"])
    if d == "randint":
        return t.random_(init["low"], init["high"])
    return t.fill_(init["value"])


def full_shapes(example, out1, out2, why):
    """Meta tensors of the outputs' full shapes, from the outputs at first dimension 1 and 2: each
    output's first dimension linear in the inputs' shared first dimension N, its others unchanged.
    Anything else is refused (`why`: the meta trace's failure)."""
    firsts = {t.shape[0] for t in example if t.dim() > 0}
    o1 = list(out1) if isinstance(out1, (tuple, list)) else [out1]
    o2 = list(out2) if isinstance(out2, (tuple, list)) else [out2]
    if len(firsts) != 1:
        raise unsupported(why + "; and the inputs share no first dimension to cut")
    n = firsts.pop()
    full = []
    for a, b in zip(o1, o2):
        if a.dim() == 0 or a.shape[1:] != b.shape[1:]:
            raise unsupported(why + "; and the outputs' shapes do not follow the first dimension")
        full.append(torch.empty([a.shape[0] + (b.shape[0] - a.shape[0]) * (n - 1)] + list(a.shape[1:]),
                                dtype=a.dtype, device="meta"))
    return full if isinstance(out1, (tuple, list)) else full[0]


class with_numbers(torch.nn.Module):
    """The problem's module with the numbers get_inputs gives (always the same) bound in place: its
    forward takes the tensor inputs alone, so the trace holds the numbers as constants."""

    def __init__(self, model, fixed, count):
        super().__init__()
        self.model, self.fixed, self.count = model, fixed, count

    def forward(self, *tensors):
        given = iter(tensors)
        return self.model(*[self.fixed[i] if i in self.fixed else next(given) for i in range(self.count)])


def own_module(model):
    """The problem's own module, inside a with_numbers or not."""
    return model.model if isinstance(model, with_numbers) else model


def fixed_numbers(mod, example):
    """{position: value} of the Python numbers among get_inputs()'s results (KernelBench's
    `s = 3.14` of a matrix-scalar product). A number must be the same each time get_inputs runs: a
    drawn one (random.random()) would need an input the kernel ABI cannot pass."""
    fixed = {i: v for i, v in enumerate(example) if isinstance(v, (bool, int, float))}
    if not fixed:
        return fixed
    with recorded_inputs():
        again = list(mod.get_inputs())
    for i, v in fixed.items():
        if len(again) != len(example) or type(again[i]) is not type(v) or again[i] != v:
            raise unsupported("get_inputs returns a %s that changes between calls (only tensors can be drawn)"
                              % type(v).__name__)
    return fixed


def named_state(model):
    """The module's parameters and buffers by name, named as in the problem's own module."""
    inner = own_module(model)
    state = dict(inner.named_parameters())
    state.update(dict(inner.named_buffers()))
    return state


def build_model(mod, fixed, count):
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    if not isinstance(model, torch.nn.Module):
        raise unsupported("Model(...) is not an nn.Module")
    return (with_numbers(model, fixed, count) if fixed else model).eval()


def check_reference(reference, inputs, params, want):
    """The printed reference, compiled as a task's reference is, run on the inputs and parameters
    the forward was traced on, against the trace's own result `want`: on meta tensors their shapes
    and dtypes, on real ones (the trace cut to a first dimension of 1) their values too. This checks
    the printing step (what the trace computed is what the task asks for); refused otherwise."""
    try:
        forward = script_function(reference)
    except Exception as e:
        raise unsupported("the reference does not compile as TorchScript: %s" % str(e).strip().splitlines()[0][:200])
    try:
        with torch.no_grad():
            got = forward(*inputs, *params)
    except Exception as e:
        raise unsupported("the reference fails where the traced forward ran: %s" % str(e).strip().splitlines()[-1][:200])
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    if len(got) != len(want) or not all(agree(g, w) for g, w in zip(got, want)):
        raise unsupported("the reference computes other %s than the traced forward"
                          % ("shapes" if want and want[0].device.type == "meta" else "numbers"))


def agree(got, want):
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.device.type == "meta":
        return True
    if not want.is_floating_point():
        return bool(torch.equal(got, want))
    # The same ops on the same CPU; TorchScript may pick another kernel for one (addmm for linear).
    return bool(torch.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(want.abs().max())), equal_nan=True))


def convert(path, scale, cpu_budget):
    mod = load_module(path, scale)
    with recorded_inputs() as rec:
        example = list(mod.get_inputs())
    fixed = fixed_numbers(mod, example)
    count = len(example)
    model = build_model(mod, fixed, count)
    names = forward_names(model, count)
    arg_names = [n for i, n in enumerate(names) if i not in fixed]
    numbers = ", ".join("%s = %r" % (names[i], v) for i, v in sorted(fixed.items()))
    example = [t for i, t in enumerate(example) if i not in fixed]
    for t in example:
        if not isinstance(t, torch.Tensor):
            raise unsupported("get_inputs returns a %s, not only tensors and numbers" % type(t).__name__)
        if t.dtype not in DTYPES:
            raise unsupported("an input of dtype %s" % t.dtype)
        if t.device.type != "meta":
            raise unsupported("an input is made without torch.randn/rand/randint/zeros/ones")
    # Inputs computed from drawn tensors: the task draws the draws and its prepare computes the
    # inputs (docs/task-format.md); the forward is traced on the computed (meta) inputs as usual.
    draws, prepare = (None, None)
    if any(id(t) not in rec.specs for t in example):
        draws, prepare = derivation(mod, rec)
    init_of = lambda t: rec.specs[id(t)] if id(t) in rec.specs and not prepare else stand_in_init(t)
    state = named_state(model)
    taken = set()
    inputs = []
    for name, t in zip(arg_names, example):
        inputs.append({"name": sanitize(name, taken), "shape": list(t.shape), "dtype": DTYPES[t.dtype]})
        if not prepare:
            inputs[-1]["init"] = rec.specs[id(t)]
    param_inits = {k: init_of_values(v) for k, v in state.items()}
    # Traced on meta tensors first (nothing of the full size is allocated). Where an op's meta
    # version is not the op itself (a Python shape function: convolutions in torch 1.13), the
    # forward is traced again on the CPU with real tensors whose first dimension is cut to 1 (cheap
    # whatever the problem's size), and that trace is kept only if a trace with the first dimension
    # cut to 2 is the same code (a size baked into the trace would differ); the outputs' full shapes
    # are the meta run's.
    try:
        code, order, out = lower(model, example)
        meta_failed = None
        # What the printed reference is checked on: the meta inputs and parameters of this trace.
        traced_on = (example, [torch.empty_like(state[k], device="meta") for k in order], out)
    except unsupported as e:  # an op with no meta kernel at all (max_pool3d in torch 1.13)
        meta_failed, code, out = str(e), "", None
    if meta_failed or "meta" in code:
        small = [materialize(t, init_of(t), first_dim=1) for t in example]
        need = sum(t.numel() * t.element_size() for t in small) + sum(
            t.numel() * t.element_size() for t in state.values())
        if need > cpu_budget:
            raise unsupported("its ops trace only with real tensors, and those need %.1f GiB (--cpu-budget %.1f)"
                              % (need / 2**30, cpu_budget / 2**30))
        model = build_model(mod, fixed, count)
        state = named_state(model)
        code, order, out1 = lower(model, small)
        traced_on = (small, [state[k] for k in order], out1)
        if any(t.dim() > 0 and t.shape[0] >= 2 for t in example):
            code2, _, out2 = lower(model, [materialize(t, init_of(t), first_dim=2) for t in example])
            if code2 != code:
                raise unsupported("the trace holds a size (traced at two sizes, the code differs)")
        else:
            out2 = out1
        # Without a meta run, the full shapes come from the two cut ones: outputs whose first
        # dimension grows with the inputs' shared first dimension, the rest unchanged.
        out = out if not meta_failed else full_shapes(example, out1, out2, meta_failed)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise unsupported("forward returns something other than tensors")
    for pname in order:
        t = state[pname]
        inputs.append({"name": sanitize(pname, taken), "shape": list(t.shape), "dtype": DTYPES.get(t.dtype, "?"),
                       "init": param_inits[pname], "role": "parameter"})
    # A tensor the forward makes on its input's device: the trace wrote the device it saw.
    first_arg = re.match(r"\s*def forward\(\s*(\w+)", code)
    if first_arg:
        code = code.replace('torch.device("meta")', first_arg.group(1) + ".device").replace(
            'torch.device("cpu")', first_arg.group(1) + ".device")
    if "meta" in code or "CONSTANTS" in code:
        raise unsupported("the forward holds constants the reference cannot")
    if re.search(r"torch\.(randn|rand|randint|randperm|bernoulli|normal|multinomial)\(", code):
        raise unsupported("the forward draws random numbers (its result is not a function of its inputs)")
    m = re.match(r"\s*def forward\(([^)]*)\)", code)
    if not m:
        raise unsupported("the trace has no forward")
    traced_args = [a.split(":")[0].strip() for a in m.group(1).split(",") if a.strip()]
    body = code[m.end():]
    # An input named like one of the trace's local variables is renamed, so the rename below
    # cannot capture it.
    local_names = set(re.findall(r"^\s*(\w+)\s*(?::[^=]*)?=", body, re.M)) | set(traced_args)
    for k, i in enumerate(inputs):
        own = traced_args[k] if k < len(traced_args) else None
        while i["name"] in local_names and i["name"] != own:
            i["name"] += "_in"
    names = [i["name"] for i in inputs]
    if len(traced_args) != len(names):
        raise unsupported("the trace takes %d arguments, the task has %d inputs" % (len(traced_args), len(names)))
    # The trace's own argument names, renamed to the task's input names (through placeholders, so
    # one rename never feeds another).
    for k, old in enumerate(traced_args):
        body = re.sub(r"\b%s\b" % re.escape(old), "__kf_arg_%d__" % k, body)
    for k, new in enumerate(names):
        body = body.replace("__kf_arg_%d__" % k, new)
    reference = "def forward(%s)%s" % (", ".join(names), body)
    outputs = [{"name": "out%d" % i if len(outs) > 1 else "out", "shape": list(o.shape),
                "dtype": DTYPES.get(o.dtype, "?")} for i, o in enumerate(outs)]
    if any(o["dtype"] == "?" for o in outputs):
        raise unsupported("an output of a dtype the task format has no name for")
    check_reference(reference, *traced_on)  # the printed code computes what was traced
    level = level_of(path)
    rel = os.path.join("level%d" % level, os.path.basename(path)) if level else os.path.basename(path)
    task = {"id": task_id(path), "category": category_of(path, level),
            "description": describe(mod, path, scale, numbers)}
    if prepare:
        task.update({"draws": draws, "prepare": prepare})
    task.update({"inputs": inputs, "outputs": outputs, "reference": reference,
            # KernelBench's own check: allclose with atol = rtol = 1e-2.
            "tolerance": {"atol": 1e-2, "rtol": 1e-2},
            "provenance": "kernelbench:%s%s" % (rel, "" if scale <= 1 else ":scaled/%d" % scale)})
    return task


def failure_reason(e):
    """A problem file's own error, with where in the file it arose."""
    last = traceback.extract_tb(e.__traceback__)[-1]
    text = str(e).strip()
    return "%s: %s (line %s of %s)" % (type(e).__name__, text.splitlines()[0][:300] if text else "",
                                       last.lineno, os.path.basename(last.filename))


def convert_one(path, scale, cpu_budget, time_limit):
    """One problem: ("task", task) or ("failed", reason). Runs in a worker process with --jobs."""
    def too_long(signum, frame):
        raise unsupported("took more than %d s (--time-limit)" % time_limit)
    signal.signal(signal.SIGALRM, too_long)
    print("importing %s" % path, file=sys.stderr, flush=True)
    signal.alarm(time_limit)
    try:
        return "task", convert(path, scale, cpu_budget)
    except unsupported as e:
        return "failed", str(e)
    except Exception as e:  # the problem file's own error
        return "failed", failure_reason(e)
    finally:
        signal.alarm(0)


def one_thread():
    torch.set_num_threads(1)  # the workers share the cores; torch would give each all of them


def workers(n):
    """A pool of `n` fresh worker processes (spawned: a problem's module state and torch's threads
    stay out of the others), each with one torch thread."""
    return concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=one_thread)


def alone(path, args):
    """One problem in a worker of its own: whether it is the one that kills its process."""
    with workers(1) as pool:
        try:
            return pool.submit(convert_one, path, *args).result()
        except concurrent.futures.process.BrokenProcessPool:
            return "failed", "the importer's worker process died converting it"


def converted(files, a):
    """(path, kind, value) for every problem, in the order of `files`. With --jobs > 1 the problems
    are converted by that many worker processes (workers()). A problem that kills its worker breaks
    the pool: the first problem whose result is lost is converted again alone, and a new pool takes
    the rest."""
    args = (a.scale, a.cpu_budget * 2**30, a.time_limit)
    if a.jobs == 1:
        for path in files:
            yield (path,) + convert_one(path, *args)
        return
    rest = list(files)
    while rest:
        with workers(a.jobs) as pool:
            futures = [pool.submit(convert_one, path, *args) for path in rest]
            for i, (path, f) in enumerate(zip(rest, futures)):
                try:
                    result = f.result()
                except concurrent.futures.process.BrokenProcessPool:
                    yield (path,) + alone(path, args)
                    rest = rest[i + 1:]
                    break
                yield (path,) + result
            else:
                rest = []


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="problem files or folders of them")
    ap.add_argument("--out", required=True, help="task file to write (JSON Lines)")
    ap.add_argument("--failures", help="JSON Lines of the problems not converted, with the reason")
    ap.add_argument("--scale", type=int, default=1, help="divide size globals by this (>= 1)")
    ap.add_argument("--time-limit", type=int, default=300,
                    help="seconds one problem may take before it is listed as not imported (default 300)")
    ap.add_argument("--cpu-budget", type=float, default=2.0,
                    help="GiB of inputs and parameters a trace on the CPU may use (default 2)")
    ap.add_argument("--jobs", type=int, default=1, help="problems converted at once, each in a process (default 1)")
    a = ap.parse_args()
    if a.scale < 1:
        ap.error("--scale must be >= 1")
    if a.jobs < 1:
        ap.error("--jobs must be >= 1")
    done, failed = 0, []
    with open(a.out + ".tmp", "w") as out:
        for path, kind, value in converted(list(problem_files(a.paths)), a):
            if kind == "task":
                out.write(json.dumps(value) + "\n")
                out.flush()
                done += 1
            else:
                failed.append({"file": path, "reason": value})
    os.replace(a.out + ".tmp", a.out)
    for f in failed:
        print("not imported: %s: %s" % (f["file"], f["reason"]), file=sys.stderr)
    if a.failures:
        with open(a.failures, "w") as f:
            for x in failed:
                f.write(json.dumps(x) + "\n")
    print("imported %d of %d problem(s) into %s (torch %s)" % (done, done + len(failed), a.out, torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
