#!/usr/bin/env python3
"""Writes the first version of kforge's built-in task library: tasks/builtin/<category>.jsonl.

The committed .jsonl files are the source of truth: the build embeds them and never runs this
script. It exists because ~230 tasks are easier to review and change as code (output shapes are
computed, not typed) than as JSON; edit a task here or in its .jsonl, then check the result with
`kforge tasks validate tasks/builtin/<file>.jsonl` (and test_tasks_gpu on a GPU host, which runs
the primary shapes). Standard library only:

    python3 tasks/builtin/generate.py [--out DIR]

Conventions (see docs/task-format.md):
- ids are "l1/<op>" for single operators and "l2/<chain>" for fused chains of 2-5 ops, after
  KernelBench's levels;
- the primary shapes are sized so the eager reference takes >= ~0.1 ms on an H200 (memory-bound
  ops move >= ~0.5 GB; GEMMs and convolutions do tens of GFLOP) and are the shapes that are timed;
- every task has a "medium" variant with odd sizes (tails, no power-of-two luck) and a "small"
  variant (last) that CI runs on the CPU in milliseconds;
- weights are drawn like PyTorch's default init, uniform(+-1/sqrt(fan_in)), so outputs stay O(1)
  and float32 tolerances (1e-4) are meaningful; data is normal(0, 1) unless an op needs a domain;
- no output may be nearly constant across draws at the primary shapes (the checks in
  tasks/task_check.hpp reject it): losses are per sample rather than a batch mean, a bias is not
  followed by a normalization that cancels it, and tolerances follow the output's scale
  (softmax probabilities get atol 1e-6).
"""

import argparse
import json
import math
import os

TASKS = {}  # category -> [task]


# ---- building blocks ------------------------------------------------------------------------

def normal(mean=0.0, std=1.0):
    return {"dist": "normal", "mean": float(mean), "std": float(std)}


def uniform(low, high):
    return {"dist": "uniform", "low": float(low), "high": float(high)}


def randint(low, high):
    return {"dist": "randint", "low": int(low), "high": int(high)}


def fan_in(n):
    """PyTorch's default weight init bound for fan-in n."""
    b = 1.0 / math.sqrt(n)
    return uniform(-b, b)


def I(name, shape, init=None, dtype="float32"):
    return {"name": name, "shape": list(shape), "dtype": dtype, "init": init or normal()}


def O(name, shape, dtype="float32"):
    return {"name": name, "shape": list(shape), "dtype": dtype}


def ref(args, *body):
    """TorchScript source: def forward(args): body lines (the last one usually a return)."""
    return "def forward(" + args + "):\n" + "".join("    " + l + "\n" for l in body)


def add(category, id, description, inputs, outputs, reference, variants, tol=None,
        allow_cublas=False):
    assert len(variants) >= 2, id
    names = [i["name"] for i in inputs]
    for v in variants:
        for k in v:
            assert k in names, (id, k)
    t = {"id": id, "category": category, "description": description, "inputs": inputs,
         "outputs": outputs, "reference": reference}
    if tol is not None:
        t["tolerance"] = {"atol": tol[0], "rtol": tol[1]}
    t["variants"] = variants
    if allow_cublas:
        t["allow_cublas"] = True
    TASKS.setdefault(category, []).append(t)


def conv_out(n, k, s=1, p=0, d=1):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def convt_out(n, k, s=1, p=0, op=0, d=1):
    return (n - 1) * s - 2 * p + d * (k - 1) + op + 1


# Tolerance of probability outputs (softmax over thousands of entries, values ~1e-4).
PROB = (1e-6, 1e-4)
# Tolerance of bfloat16 GEMM outputs (~0.5 at the primary shapes, ~0.03 at the small ones):
# the half-precision default atol 1e-2 would cover a quarter of the small outputs.
BF16_GEMM = (2e-3, 1e-2)

# Shapes shared by many tasks: (primary, medium, small).
ROWS = ([16384, 8192], [1000, 1537], [7, 33])       # 2-D elementwise / row-wise ops
WIDE = ([4096, 32768], [129, 4099], [5, 67])        # long rows
IMG = ([64, 128, 128, 128], [3, 17, 31, 29], [2, 4, 6, 5])  # NCHW activations


# ---- elementwise ----------------------------------------------------------------------------

def elementwise():
    c = "elementwise"
    P, M, S = ROWS
    unary = [
        # id, description, expression, init, tolerance
        ("relu", "ReLU.", "torch.relu(x)", None),
        ("leaky_relu", "Leaky ReLU, negative slope 0.01.", "torch.leaky_relu(x, 0.01)", None),
        ("sigmoid", "Logistic sigmoid.", "torch.sigmoid(x)", None),
        ("tanh", "Hyperbolic tangent.", "torch.tanh(x)", None),
        ("gelu", "GELU, exact (erf) form.", "torch.gelu(x)", None),
        ("gelu_tanh", "GELU, tanh approximation.", "torch.gelu(x, approximate='tanh')", None),
        ("silu", "SiLU (swish): x * sigmoid(x).", "torch.silu(x)", None),
        ("mish", "Mish: x * tanh(softplus(x)).", "torch.mish(x)", None),
        ("softplus", "Softplus, beta 1, threshold 20.", "torch.softplus(x)", None),
        ("elu", "ELU, alpha 1.", "torch.elu(x)", None),
        ("selu", "SELU.", "torch.selu(x)", None),
        ("celu", "CELU, alpha 1.", "torch.celu(x)", None),
        ("hardtanh", "Hardtanh: clamp to [-1, 1].", "torch.hardtanh(x)", None),
        ("hardsigmoid", "Hard sigmoid: relu6(x + 3) / 6.", "torch.hardsigmoid(x)", None),
        ("hardswish", "Hard swish: x * relu6(x + 3) / 6.", "torch.hardswish(x)", None),
        ("softsign", "Softsign: x / (1 + |x|).", "x / (1 + torch.abs(x))", None),
        ("log_sigmoid", "Log of the logistic sigmoid.", "torch.log_sigmoid(x)", None),
        ("hardshrink", "Hard shrink, lambda 0.5.", "torch.hardshrink(x, 0.5)", None),
        ("softshrink", "Soft shrink, lambda 0.5.", "torch.softshrink(x, 0.5)", None),
        ("threshold", "Threshold: x if x > 0.1 else 20.", "torch.threshold(x, 0.1, 20.0)", None),
        ("exp", "Exponential.", "torch.exp(x)", uniform(-4, 4)),
        ("expm1", "exp(x) - 1.", "torch.expm1(x)", uniform(-4, 4)),
        ("log", "Natural logarithm.", "torch.log(x)", uniform(0.01, 10)),
        ("log1p", "log(1 + x).", "torch.log1p(x)", uniform(-0.9, 10)),
        ("sqrt", "Square root.", "torch.sqrt(x)", uniform(0, 100)),
        ("rsqrt", "Reciprocal square root.", "torch.rsqrt(x)", uniform(0.1, 100)),
        ("reciprocal", "1 / x.", "torch.reciprocal(x)", uniform(0.5, 4)),
        ("abs", "Absolute value.", "torch.abs(x)", None),
        ("sin", "Sine.", "torch.sin(x)", uniform(-6.3, 6.3)),
        ("erf", "Error function.", "torch.erf(x)", None),
        ("square", "x squared.", "x * x", None),
        ("cube", "x cubed with pow.", "torch.pow(x, 3.0)", None),
        ("clamp", "Clamp to [-0.5, 0.5].", "torch.clamp(x, -0.5, 0.5)", None),
        ("logit", "Logit: log(x / (1 - x)).", "torch.logit(x)", uniform(0.01, 0.99)),
    ]
    for name, desc, expr, init in unary:
        add(c, "l1/" + name, desc + " Elementwise over a 2-D tensor.",
            [I("x", P, init)], [O("y", P)], ref("x", "return " + expr),
            [{"x": M}, {"x": S}])

    binary = [
        ("add", "Elementwise sum x + y.", "x + y", None, None),
        ("mul", "Elementwise product x * y.", "x * y", None, None),
        ("div", "Elementwise quotient x / y, y in [0.5, 2).", "x / y", None, uniform(0.5, 2)),
        ("maximum", "Elementwise maximum.", "torch.maximum(x, y)", None, None),
        ("pow", "x ** y for x in [0.5, 2), y in [-2, 2).", "torch.pow(x, y)", uniform(0.5, 2),
         uniform(-2, 2)),
        ("atan2", "atan2(y, x) elementwise.", "torch.atan2(y, x)", None, None),
        ("axpby", "2.5 * x - 0.75 * y.", "2.5 * x - 0.75 * y", None, None),
        ("squared_difference", "(x - y) squared.", "(x - y) * (x - y)", None, None),
    ]
    for name, desc, expr, ix, iy in binary:
        add(c, "l1/" + name, desc + " Both inputs are 2-D of one shape.",
            [I("x", P, ix), I("y", P, iy)], [O("z", P)], ref("x, y", "return " + expr),
            [{"x": M, "y": M}, {"x": S, "y": S}])

    add(c, "l1/addcmul", "x + 0.5 * y * z elementwise.",
        [I("x", P), I("y", P), I("z", P)], [O("out", P)],
        ref("x, y, z", "return torch.addcmul(x, y, z, value=0.5)"),
        [{"x": M, "y": M, "z": M}, {"x": S, "y": S, "z": S}])
    add(c, "l1/lerp", "Linear interpolation x + w * (y - x) with a weight tensor w in [0, 1).",
        [I("x", P), I("y", P), I("w", P, uniform(0, 1))], [O("out", P)],
        ref("x, y, w", "return torch.lerp(x, y, w)"),
        [{"x": M, "y": M, "w": M}, {"x": S, "y": S, "w": S}])
    add(c, "l1/where", "Select x where c > 0, else y.",
        [I("c", P), I("x", P), I("y", P)], [O("out", P)],
        ref("c, x, y", "return torch.where(c > 0, x, y)"),
        [{"c": M, "x": M, "y": M}, {"c": S, "x": S, "y": S}])
    add(c, "l1/masked_fill", "Zero the elements of x where m > 0.5 (m uniform in [0, 1)).",
        [I("x", P), I("m", P, uniform(0, 1))], [O("out", P)],
        ref("x, m", "return torch.masked_fill(x, m > 0.5, 0.0)"),
        [{"x": M, "m": M}, {"x": S, "m": S}])
    add(c, "l1/add_row_broadcast", "Add a row vector b[N] to every row of x[M, N].",
        [I("x", P), I("b", [P[1]])], [O("out", P)], ref("x, b", "return x + b"),
        [{"x": M, "b": [M[1]]}, {"x": S, "b": [S[1]]}])
    add(c, "l1/mul_col_broadcast", "Scale each row of x[M, N] by s[M, 1].",
        [I("x", P), I("s", [P[0], 1])], [O("out", P)], ref("x, s", "return x * s"),
        [{"x": M, "s": [M[0], 1]}, {"x": S, "s": [S[0], 1]}])
    add(c, "l1/glu", "Gated linear unit over the last dim: a * sigmoid(b), [a, b] = split(x).",
        [I("x", P)], [O("y", [P[0], P[1] // 2])], ref("x", "return torch.glu(x, -1)"),
        [{"x": [1000, 1538]}, {"x": [7, 34]}])
    add(c, "l1/relu_bf16", "ReLU on bfloat16.",
        [I("x", P, None, "bfloat16")], [O("y", P, "bfloat16")], ref("x", "return torch.relu(x)"),
        [{"x": M}, {"x": S}])
    add(c, "l1/gelu_bf16", "GELU (erf) on bfloat16.",
        [I("x", P, None, "bfloat16")], [O("y", P, "bfloat16")], ref("x", "return torch.gelu(x)"),
        [{"x": M}, {"x": S}])
    add(c, "l1/add_bf16", "Elementwise sum of two bfloat16 tensors.",
        [I("x", P, None, "bfloat16"), I("y", P, None, "bfloat16")], [O("z", P, "bfloat16")],
        ref("x, y", "return x + y"), [{"x": M, "y": M}, {"x": S, "y": S}])
    add(c, "l1/silu_4d", "SiLU on a 4-D activation tensor (NCHW).",
        [I("x", IMG[0])], [O("y", IMG[0])], ref("x", "return torch.silu(x)"),
        [{"x": IMG[1]}, {"x": IMG[2]}])


# ---- reductions, scans, softmax ---------------------------------------------------------------

def reduction():
    c = "reduction"
    P, M, S = [16384, 16384], [1000, 1537], [7, 33]
    loose = (1e-3, 1e-4)  # sums of 16k terms: float32 reordering error reaches ~1e-4
    rows = [
        ("sum_rows", "Sum over the last dim.", "torch.sum(x, 1)", [P[0]], loose, None),
        ("sum_cols", "Sum over the first dim.", "torch.sum(x, 0)", [P[1]], loose, None),
        ("mean_rows", "Mean over the last dim.", "torch.mean(x, 1)", [P[0]], None, None),
        ("mean_cols", "Mean over the first dim.", "torch.mean(x, 0)", [P[1]], None, None),
        ("amax_rows", "Max over the last dim.", "torch.amax(x, 1)", [P[0]], None, None),
        ("amin_cols", "Min over the first dim.", "torch.amin(x, 0)", [P[1]], None, None),
        ("prod_rows", "Product over the last dim, x in [0.99, 1.01).", "torch.prod(x, 1)",
         [P[0]], (1e-4, 1e-3), uniform(0.99, 1.01)),
        ("argmax_rows", "Index of the max over the last dim.", "torch.argmax(x, 1)", [P[0]], None,
         None),
        ("argmin_cols", "Index of the min over the first dim.", "torch.argmin(x, 0)", [P[1]],
         None, None),
        ("logsumexp_rows", "log(sum(exp(x))) over the last dim.", "torch.logsumexp(x, [1])",
         [P[0]], None, None),
        ("l2_norm_rows", "Euclidean norm of each row.", "torch.linalg_vector_norm(x, 2.0, [1])",
         [P[0]], None, None),
        ("var_rows", "Unbiased variance over the last dim.", "torch.var(x, [1])", [P[0]], None,
         None),
        ("std_cols", "Unbiased standard deviation over the first dim.", "torch.std(x, [0])",
         [P[1]], None, None),
        ("count_positive_rows", "Number of positive elements in each row (int64).",
         "torch.sum(x > 0, 1)", [P[0]], None, None),
    ]
    for name, desc, expr, oshape, tol, init in rows:
        dtype = "int64" if name.startswith(("argm", "count")) else "float32"
        add(c, "l1/" + name, desc + " x is 2-D.", [I("x", P, init)], [O("y", oshape, dtype)],
            ref("x", "return " + expr), [{"x": M}, {"x": S}], tol)

    # Whole-tensor reductions to a 0-d result. Only ones whose value moves well beyond the
    # tolerance between draws: the mean, max or |x|-sum of 268M i.i.d. values is nearly a
    # constant at these sizes, and a kernel returning that constant would pass.
    add(c, "l1/sum_all", "Sum of every element (a 0-d result).", [I("x", P)], [O("y", [])],
        ref("x", "return torch.sum(x)"), [{"x": M}, {"x": S}], (1e-2, 1e-4))
    add(c, "l1/dot", "Dot product of two vectors of 134M elements (a 0-d result).",
        [I("u", [134217728]), I("v", [134217728])], [O("y", [])],
        ref("u, v", "return torch.dot(u, v)"), [{"u": [1000003], "v": [1000003]},
                                                 {"u": [37], "v": [37]}], (1e-2, 1e-4))

    T, TM, TS = [128, 4096, 512], [3, 1001, 67], [2, 5, 7]
    add(c, "l1/mean_mid_dim", "Mean over the middle dim of a 3-D tensor.",
        [I("x", T)], [O("y", [T[0], T[2]])], ref("x", "return torch.mean(x, 1)"),
        [{"x": TM}, {"x": TS}])
    add(c, "l1/argmax_mid_dim", "Index of the max over the middle dim of a 3-D tensor.",
        [I("x", T)], [O("y", [T[0], T[2]], "int64")], ref("x", "return torch.argmax(x, 1)"),
        [{"x": TM}, {"x": TS}])
    add(c, "l1/amin_last_keepdim", "Min over the last dim of a 3-D tensor, keeping the dim.",
        [I("x", T)], [O("y", [T[0], T[1], 1])],
        ref("x", "return torch.amin(x, -1, keepdim=True)"), [{"x": TM}, {"x": TS}])
    G = [128, 256, 64, 64]
    add(c, "l1/mean_spatial", "Mean over H and W of an NCHW tensor (global average pool).",
        [I("x", G)], [O("y", [G[0], G[1]])], ref("x", "return torch.mean(x, [2, 3])"),
        [{"x": [3, 17, 31, 29]}, {"x": [2, 4, 6, 5]}])

    # Scans.
    SP, SM, SS = [16384, 8192], [1000, 1537], [7, 33]
    add(c, "l1/cumsum_rows", "Inclusive prefix sum along the last dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.cumsum(x, 1)"),
        [{"x": SM}, {"x": SS}], (1e-3, 1e-4))
    add(c, "l1/cumsum_reverse", "Suffix sum along the last dim (cumsum from the right).",
        [I("x", SP)], [O("y", SP)],
        ref("x", "return torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])"),
        [{"x": SM}, {"x": SS}], (1e-3, 1e-4))
    add(c, "l1/cumsum_exclusive", "Exclusive prefix sum along the last dim (first element 0).",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.cumsum(x, 1) - x"),
        [{"x": SM}, {"x": SS}], (1e-3, 1e-4))
    add(c, "l1/cumprod_rows", "Inclusive prefix product along the last dim, x in [0.99, 1.01).",
        [I("x", SP, uniform(0.99, 1.01))], [O("y", SP)], ref("x", "return torch.cumprod(x, 1)"),
        [{"x": SM}, {"x": SS}], (1e-4, 1e-3))
    add(c, "l1/logcumsumexp_rows", "log(cumsum(exp(x))) along the last dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.logcumsumexp(x, 1)"),
        [{"x": SM}, {"x": SS}])
    add(c, "l1/cummax_rows", "Running maximum along the last dim (values).",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.cummax(x, 1)[0]"),
        [{"x": SM}, {"x": SS}])

    # Softmax family. Probabilities over thousands of entries are ~1e-4: atol 1e-6 keeps every
    # entry meaningful (with 1e-4, most entries could be anything in [0, 2e-4]).
    add(c, "l1/softmax_rows", "Softmax over the last dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.softmax(x, -1)"),
        [{"x": SM}, {"x": SS}], PROB)
    add(c, "l1/softmax_wide_rows", "Softmax over long rows (32768).",
        [I("x", WIDE[0])], [O("y", WIDE[0])], ref("x", "return torch.softmax(x, -1)"),
        [{"x": WIDE[1]}, {"x": WIDE[2]}], PROB)
    add(c, "l1/softmax_cols", "Softmax over the first dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.softmax(x, 0)"),
        [{"x": SM}, {"x": SS}], PROB)
    add(c, "l1/log_softmax_rows", "Log-softmax over the last dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.log_softmax(x, 1)"),
        [{"x": SM}, {"x": SS}])
    add(c, "l1/softmax_temperature", "Softmax of x / 0.7 over the last dim.",
        [I("x", SP)], [O("y", SP)], ref("x", "return torch.softmax(x / 0.7, -1)"),
        [{"x": SM}, {"x": SS}], PROB)
    add(c, "l1/softmax_bf16", "Softmax over the last dim in bfloat16.",
        [I("x", SP, None, "bfloat16")], [O("y", SP, "bfloat16")],
        ref("x", "return torch.softmax(x, -1)"), [{"x": SM}, {"x": SS}], (1e-5, 1e-2))


# ---- normalization ----------------------------------------------------------------------------

def normalization():
    c = "normalization"
    P, M, S = [16384, 8192], [1000, 1537], [7, 33]
    aff = lambda d: [I("w", [d], uniform(0.5, 1.5)), I("b", [d], uniform(-0.5, 0.5))]
    add(c, "l1/layer_norm", "LayerNorm over the last dim with weight and bias, eps 1e-5.",
        [I("x", P)] + aff(P[1]), [O("y", P)],
        ref("x, w, b", "return torch.layer_norm(x, [x.size(-1)], w, b, 1e-5)"),
        [{"x": M, "w": [M[1]], "b": [M[1]]}, {"x": S, "w": [S[1]], "b": [S[1]]}])
    add(c, "l1/layer_norm_plain", "LayerNorm over the last dim, no affine parameters.",
        [I("x", P)], [O("y", P)], ref("x", "return torch.layer_norm(x, [x.size(-1)])"),
        [{"x": M}, {"x": S}])
    L3, L3M, L3S = [64, 512, 1024], [3, 33, 257], [2, 3, 11]
    add(c, "l1/layer_norm_2d_features", "LayerNorm over the last two dims of a 3-D tensor.",
        [I("x", L3), I("w", L3[1:], uniform(0.5, 1.5)), I("b", L3[1:], uniform(-0.5, 0.5))],
        [O("y", L3)], ref("x, w, b", "return torch.layer_norm(x, [x.size(1), x.size(2)], w, b)"),
        [{"x": L3M, "w": L3M[1:], "b": L3M[1:]}, {"x": L3S, "w": L3S[1:], "b": L3S[1:]}])
    add(c, "l1/rms_norm", "RMSNorm over the last dim with a weight, eps 1e-6.",
        [I("x", P), I("w", [P[1]], uniform(0.5, 1.5))], [O("y", P)],
        ref("x, w", "return x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + 1e-6) * w"),
        [{"x": M, "w": [M[1]]}, {"x": S, "w": [S[1]]}])
    add(c, "l1/rms_norm_plain", "RMSNorm over the last dim, no weight, eps 1e-6.",
        [I("x", P)], [O("y", P)],
        ref("x", "return x * torch.rsqrt(torch.mean(x * x, -1, keepdim=True) + 1e-6)"),
        [{"x": M}, {"x": S}])
    add(c, "l1/rms_norm_channels", "RMSNorm over the channel dim of NCHW (as in KernelBench).",
        [I("x", IMG[0])], [O("y", IMG[0])],
        ref("x", "return x / torch.sqrt(torch.mean(x * x, 1, keepdim=True) + 1e-5)"),
        [{"x": IMG[1]}, {"x": IMG[2]}])
    add(c, "l1/layer_norm_bf16", "LayerNorm over the last dim in bfloat16.",
        [I("x", P, None, "bfloat16"), I("w", [P[1]], uniform(0.5, 1.5), "bfloat16"),
         I("b", [P[1]], uniform(-0.5, 0.5), "bfloat16")], [O("y", P, "bfloat16")],
        ref("x, w, b", "return torch.layer_norm(x, [x.size(-1)], w, b, 1e-5)"),
        [{"x": M, "w": [M[1]], "b": [M[1]]}, {"x": S, "w": [S[1]], "b": [S[1]]}])

    N, NM, NS = [64, 128, 128, 128], [3, 17, 31, 29], [4, 3, 5, 6]
    bn = lambda s: {"x": s, "w": [s[1]], "b": [s[1]]}
    add(c, "l1/batch_norm_train", "BatchNorm2d in training mode: batch statistics, eps 1e-5.",
        [I("x", N)] + aff(N[1]), [O("y", N)],
        ref("x, w, b", "return torch.batch_norm(x, w, b, None, None, True, 0.1, 1e-5, False)"),
        [bn(NM), bn(NS)])
    add(c, "l1/batch_norm_eval", "BatchNorm2d in inference mode with running statistics.",
        [I("x", N)] + aff(N[1]) + [I("mean", [N[1]], uniform(-0.5, 0.5)),
                                   I("var", [N[1]], uniform(0.5, 2))], [O("y", N)],
        ref("x, w, b, mean, var",
            "return torch.batch_norm(x, w, b, mean, var, False, 0.1, 1e-5, False)"),
        [dict(bn(NM), mean=[NM[1]], var=[NM[1]]), dict(bn(NS), mean=[NS[1]], var=[NS[1]])])
    B1 = [65536, 2048]
    add(c, "l1/batch_norm_1d_train", "BatchNorm1d over [N, C] in training mode.",
        [I("x", B1)] + aff(B1[1]), [O("y", B1)],
        ref("x, w, b", "return torch.batch_norm(x, w, b, None, None, True, 0.1, 1e-5, False)"),
        [bn([1001, 67]), bn([9, 5])])
    GN, GNM, GNS = [64, 256, 64, 64], [3, 64, 17, 19], [2, 8, 3, 5]
    add(c, "l1/group_norm", "GroupNorm with 32 groups, weight and bias, eps 1e-5.",
        [I("x", GN)] + aff(GN[1]), [O("y", GN)],
        ref("x, w, b", "return torch.group_norm(x, 32, w, b, 1e-5)"),
        [bn(GNM), bn([2, 32, 3, 5])])
    add(c, "l1/group_norm_8", "GroupNorm with 8 groups, weight and bias, eps 1e-5.",
        [I("x", GN)] + aff(GN[1]), [O("y", GN)],
        ref("x, w, b", "return torch.group_norm(x, 8, w, b, 1e-5)"),
        [bn(GNM), bn(GNS)])
    add(c, "l1/instance_norm", "InstanceNorm2d: per sample and channel statistics, no affine.",
        [I("x", N)], [O("y", N)],
        ref("x", "return torch.instance_norm(x, None, None, None, None, True, 0.1, 1e-5, False)"),
        [{"x": NM}, {"x": NS}])
    add(c, "l1/l2_normalize_rows", "Divide each row by its Euclidean norm (eps 1e-12).",
        [I("x", P)], [O("y", P)],
        ref("x", "return x / torch.clamp(torch.linalg_vector_norm(x, 2.0, [1], True), 1e-12)"),
        [{"x": M}, {"x": S}])
    # Entries are ~1/sqrt(numel) (~1e-4 at the primary shapes): atol must be far below that.
    add(c, "l1/frobenius_normalize", "Divide the whole tensor by its Frobenius norm.",
        [I("x", P)], [O("y", P)], ref("x", "return x / torch.linalg_vector_norm(x)"),
        [{"x": M}, {"x": S}], (1e-9, 1e-4))
    add(c, "l1/standardize_cols", "Z-score each column: (x - mean) / std over the first dim.",
        [I("x", P)], [O("y", P)],
        ref("x", "return (x - torch.mean(x, 0, keepdim=True)) / torch.std(x, [0], True, True)"),
        [{"x": M}, {"x": S}])


# ---- GEMM -----------------------------------------------------------------------------------

def gemm():
    c = "gemm"

    def mm(id, desc, m, k, n, small, medium, a_t=False, b_t=False, dtype="float32", tol=None):
        a = [k, m] if a_t else [m, k]
        b = [n, k] if b_t else [k, n]
        ea = "a.t()" if a_t else "a"
        eb = "b.t()" if b_t else "b"
        sh = lambda mm_, kk, nn: {"a": [kk, mm_] if a_t else [mm_, kk],
                                  "b": [nn, kk] if b_t else [kk, nn]}
        add(c, id, desc, [I("a", a, None, dtype), I("b", b, fan_in(k), dtype)],
            [O("c", [m, n], dtype)], ref("a, b", "return torch.matmul(" + ea + ", " + eb + ")"),
            [sh(*medium), sh(*small)], tol)

    mm("l1/matmul_square", "C = A @ B, square 4096.", 4096, 4096, 4096, (8, 16, 8),
       (1000, 257, 999))
    mm("l1/matmul_rect", "C = A @ B, M=8192, K=1024, N=8192.", 8192, 1024, 8192, (9, 12, 7),
       (1023, 129, 515))
    mm("l1/matmul_tall_skinny", "C = A @ B with tall A: M=131072, K=512, N=256.", 131072, 512,
       256, (33, 8, 5), (4097, 65, 31))
    mm("l1/matmul_large_k", "C = A @ B with a long reduction: M=N=512, K=65536.", 512, 65536, 512,
       (6, 64, 5), (127, 5000, 129))
    mm("l1/matmul_small_k", "C = A @ B with a short reduction: M=N=16384, K=32.", 16384, 32, 16384,
       (12, 4, 10), (999, 31, 1001))
    mm("l1/matvec", "y = A @ x with A 16384 x 16384 (x as a column).", 16384, 16384, 1,
       (9, 17, 1), (1001, 1531, 1))
    mm("l1/matmul_a_t", "C = A^T @ B (A stored K x M).", 4096, 4096, 4096, (8, 16, 8),
       (1000, 257, 999), a_t=True)
    mm("l1/matmul_b_t", "C = A @ B^T (B stored N x K).", 4096, 4096, 4096, (8, 16, 8),
       (1000, 257, 999), b_t=True)
    mm("l1/matmul_both_t", "C = A^T @ B^T.", 4096, 4096, 4096, (8, 16, 8), (1000, 257, 999),
       a_t=True, b_t=True)
    mm("l1/matmul_bf16", "C = A @ B in bfloat16, square 8192.", 8192, 8192, 8192, (8, 16, 8),
       (1000, 257, 999), dtype="bfloat16", tol=BF16_GEMM)
    mm("l1/matmul_bf16_rect", "C = A @ B in bfloat16, M=16384, K=4096, N=2048.", 16384, 4096,
       2048, (8, 16, 8), (1000, 257, 999), dtype="bfloat16", tol=BF16_GEMM)

    B = [(64, 512, 1024, 512), (3, 33, 65, 17), (2, 4, 8, 3)]  # batch, M, K, N
    bb = lambda s: {"a": [s[0], s[1], s[2]], "b": [s[0], s[2], s[3]]}
    p = B[0]
    add(c, "l1/bmm", "Batched matmul: C[i] = A[i] @ B[i], 64 batches of 512x1024 @ 1024x512.",
        [I("a", [p[0], p[1], p[2]]), I("b", [p[0], p[2], p[3]], fan_in(p[2]))],
        [O("c", [p[0], p[1], p[3]])], ref("a, b", "return torch.bmm(a, b)"),
        [bb(B[1]), bb(B[2])])
    add(c, "l1/bmm_b_t", "Batched C[i] = A[i] @ B[i]^T (B stored batch x N x K).",
        [I("a", [p[0], p[1], p[2]]), I("b", [p[0], p[3], p[2]], fan_in(p[2]))],
        [O("c", [p[0], p[1], p[3]])], ref("a, b", "return torch.bmm(a, b.transpose(1, 2))"),
        [{"a": [3, 33, 65], "b": [3, 17, 65]}, {"a": [2, 4, 8], "b": [2, 3, 8]}])
    add(c, "l1/matmul_broadcast", "3-D @ 2-D: every batch of A times one B (32x1024x2048 @ "
        "2048x768).",
        [I("a", [32, 1024, 2048]), I("b", [2048, 768], fan_in(2048))], [O("c", [32, 1024, 768])],
        ref("a, b", "return torch.matmul(a, b)"),
        [{"a": [3, 33, 129], "b": [129, 17]}, {"a": [2, 3, 8], "b": [8, 5]}])
    add(c, "l1/einsum_4d_matrix", "4-D tensor times a matrix over the last index: "
        "einsum('bijl,lk->bijk').",
        [I("a", [16, 256, 64, 256]), I("b", [256, 768], fan_in(256))],
        [O("c", [16, 256, 64, 768])], ref("a, b", "return torch.einsum('bijl,lk->bijk', [a, b])"),
        [{"a": [2, 5, 7, 33], "b": [33, 17]}, {"a": [2, 3, 2, 8], "b": [8, 5]}])
    add(c, "l1/linear", "Linear layer y = x @ W^T + b (x 8192x4096, W 4096x4096).",
        [I("x", [8192, 4096]), I("w", [4096, 4096], fan_in(4096)), I("b", [4096], fan_in(4096))],
        [O("y", [8192, 4096])], ref("x, w, b", "return torch.linear(x, w, b)"),
        [{"x": [1000, 257], "w": [129, 257], "b": [129]}, {"x": [8, 16], "w": [8, 16], "b": [8]}])
    add(c, "l1/linear_no_bias", "Linear layer without bias, y = x @ W^T (x 16384x2048, "
        "W 8192x2048).",
        [I("x", [16384, 2048]), I("w", [8192, 2048], fan_in(2048))], [O("y", [16384, 8192])],
        ref("x, w", "return torch.linear(x, w)"),
        [{"x": [1000, 257], "w": [129, 257]}, {"x": [8, 16], "w": [8, 16]}])
    add(c, "l1/addmm", "C + A @ B with C broadcast from one row (bias-style addmm).",
        [I("bias", [4096], fan_in(4096)), I("a", [8192, 4096]), I("b", [4096, 4096], fan_in(4096))],
        [O("c", [8192, 4096])], ref("bias, a, b", "return torch.addmm(bias, a, b)"),
        [{"bias": [129], "a": [1000, 257], "b": [257, 129]},
         {"bias": [8], "a": [8, 16], "b": [16, 8]}])
    add(c, "l1/baddbmm", "0.5 * C + 2 * (A @ B), batched.",
        [I("cin", [64, 512, 512]), I("a", [64, 512, 1024]), I("b", [64, 1024, 512], fan_in(1024))],
        [O("c", [64, 512, 512])],
        ref("cin, a, b", "return torch.baddbmm(cin, a, b, beta=0.5, alpha=2.0)"),
        [{"cin": [3, 33, 17], "a": [3, 33, 65], "b": [3, 65, 17]},
         {"cin": [2, 4, 3], "a": [2, 4, 8], "b": [2, 8, 3]}])
    add(c, "l1/diag_matmul", "diag(d) @ B: scale row i of B by d[i] (via torch.diag).",
        [I("d", [4096]), I("b", [4096, 4096])], [O("c", [4096, 4096])],
        ref("d, b", "return torch.matmul(torch.diag(d), b)"),
        [{"d": [257], "b": [257, 129]}, {"d": [8], "b": [8, 5]}])
    add(c, "l1/triu_matmul", "Product of two upper-triangular matrices (upper part kept).",
        [I("a", [4096, 4096]), I("b", [4096, 4096], fan_in(4096))], [O("c", [4096, 4096])],
        ref("a, b", "return torch.triu(torch.matmul(torch.triu(a), torch.triu(b)))"),
        [{"a": [257, 257], "b": [257, 257]}, {"a": [9, 9], "b": [9, 9]}])
    add(c, "l1/tril_matmul", "Product of two lower-triangular matrices (lower part kept).",
        [I("a", [4096, 4096]), I("b", [4096, 4096], fan_in(4096))], [O("c", [4096, 4096])],
        ref("a, b", "return torch.tril(torch.matmul(torch.tril(a), torch.tril(b)))"),
        [{"a": [257, 257], "b": [257, 257]}, {"a": [9, 9], "b": [9, 9]}])
    add(c, "l1/outer", "Outer product of two vectors of 16384.",
        [I("u", [16384]), I("v", [16384])], [O("c", [16384, 16384])],
        ref("u, v", "return torch.outer(u, v)"), [{"u": [1001], "v": [999]}, {"u": [7], "v": [9]}])
    add(c, "l1/attention_scores", "Attention logits Q @ K^T per head: einsum('bhld,bhmd->bhlm').",
        [I("q", [16, 16, 1024, 64]), I("k", [16, 16, 1024, 64], fan_in(64))],
        [O("s", [16, 16, 1024, 1024])],
        ref("q, k", "return torch.einsum('bhld,bhmd->bhlm', [q, k])"),
        [{"q": [2, 3, 33, 17], "k": [2, 3, 31, 17]}, {"q": [1, 2, 5, 4], "k": [1, 2, 6, 4]}])


# ---- convolution ------------------------------------------------------------------------------

def conv():
    c = "conv"

    def conv2d(id, desc, x, cout, k, s=1, p=0, d=1, g=1, bias=True, variants=(), tol=None):
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (p, p) if isinstance(p, int) else p
        n, cin, h, w = x
        wshape = [cout, cin // g, kh, kw]
        out = [n, cout, conv_out(h, kh, s, ph, d), conv_out(w, kw, s, pw, d)]
        ins = [I("x", x), I("w", wshape, fan_in(cin // g * kh * kw))]
        args = "x, w"
        # Depthwise: groups follow the input's channels, so variants may change them.
        groups = "x.size(1)" if g == cin else str(g)
        call = "torch.conv2d(x, w, %s, [%d, %d], [%d, %d], [%d, %d], %s)" % (
            "b" if bias else "None", s, s, ph, pw, d, d, groups)
        if bias:
            ins.append(I("b", [cout], fan_in(cin // g * kh * kw)))
            args += ", b"
        vs = []
        for (vn, vcin, vh, vw, vcout) in variants:
            v = {"x": [vn, vcin, vh, vw], "w": [vcout, 1 if g == cin else vcin // g, kh, kw]}
            if bias:
                v["b"] = [vcout]
            vs.append(v)
        add(c, id, desc, ins, [O("y", out)], ref(args, "return " + call), vs, tol)

    conv2d("l1/conv2d_3x3", "Conv2d 3x3, stride 1, padding 1, with bias (64 -> 128 channels).",
           [32, 64, 128, 128], 128, 3, p=1, variants=[(2, 5, 17, 19, 7), (1, 3, 6, 5, 4)])
    conv2d("l1/conv2d_1x1", "Pointwise conv2d 1x1 (256 -> 512 channels).",
           [32, 256, 64, 64], 512, 1, variants=[(2, 33, 9, 11, 17), (1, 8, 3, 4, 5)])
    conv2d("l1/conv2d_3x3_stride2", "Conv2d 3x3, stride 2, padding 1 (128 -> 256 channels).",
           [32, 128, 128, 128], 256, 3, s=2, p=1, variants=[(2, 5, 17, 19, 7), (1, 3, 7, 6, 4)])
    conv2d("l1/conv2d_5x5_no_bias", "Conv2d 5x5, padding 2, no bias (64 -> 64 channels).",
           [32, 64, 128, 128], 64, 5, p=2, bias=False,
           variants=[(2, 5, 17, 19, 7), (1, 3, 6, 5, 4)])
    conv2d("l1/conv2d_7x7_stem", "Conv2d 7x7, stride 2, padding 3 on an RGB image (3 -> 64).",
           [64, 3, 512, 512], 64, 7, s=2, p=3, variants=[(2, 3, 33, 31, 5), (1, 3, 9, 8, 4)])
    conv2d("l1/conv2d_dilated", "Conv2d 3x3, dilation 2, padding 2 (64 -> 64 channels).",
           [32, 64, 128, 128], 64, 3, p=2, d=2, variants=[(2, 5, 17, 19, 7), (1, 3, 7, 6, 4)])
    conv2d("l1/conv2d_asymmetric_kernel", "Conv2d with a 3x7 kernel, padding (1, 3) on a "
           "non-square input.", [32, 64, 128, 256], 64, (3, 7), p=(1, 3),
           variants=[(2, 5, 17, 29, 7), (1, 3, 5, 9, 4)])
    conv2d("l1/conv2d_depthwise", "Depthwise conv2d 3x3, padding 1 (groups = channels = 256).",
           [32, 256, 128, 128], 256, 3, p=1, g=256,
           variants=[(2, 7, 17, 19, 7), (1, 4, 6, 5, 4)])
    conv2d("l1/conv2d_grouped", "Grouped conv2d 3x3, padding 1, 4 groups (128 -> 128).",
           [32, 128, 128, 128], 128, 3, p=1, g=4, variants=[(2, 8, 17, 19, 12), (1, 4, 6, 5, 8)])

    def conv1d(id, desc, x, cout, k, s=1, p=0, d=1, g=1, variants=()):
        n, cin, l = x
        out = [n, cout, conv_out(l, k, s, p, d)]
        ins = [I("x", x), I("w", [cout, cin // g, k], fan_in(cin // g * k)),
               I("b", [cout], fan_in(cin // g * k))]
        vs = [{"x": [vn, vc, vl], "w": [vo, 1 if g == cin else vc // g, k], "b": [vo]}
              for (vn, vc, vl, vo) in variants]
        groups = "x.size(1)" if g == cin else str(g)
        add(c, id, desc, ins, [O("y", out)],
            ref("x, w, b", "return torch.conv1d(x, w, b, [%d], [%d], [%d], %s)" % (s, p, d, groups)),
            vs)

    conv1d("l1/conv1d", "Conv1d kernel 5, padding 2 (128 -> 128 channels, length 16384).",
           [32, 128, 16384], 128, 5, p=2, variants=[(2, 5, 1001, 7), (1, 3, 17, 4)])
    conv1d("l1/conv1d_strided_dilated", "Conv1d kernel 3, stride 2, dilation 2, padding 2.",
           [32, 128, 32768], 256, 3, s=2, p=2, d=2, variants=[(2, 5, 1001, 7), (1, 3, 17, 4)])
    conv1d("l1/conv1d_depthwise", "Depthwise conv1d kernel 7, padding 3 (512 channels).",
           [32, 512, 16384], 512, 7, p=3, g=512, variants=[(2, 7, 1001, 7), (1, 4, 17, 4)])

    def conv3d(id, desc, x, cout, k, s=1, p=0, variants=()):
        n, cin, d_, h, w = x
        out = [n, cout] + [conv_out(v, k, s, p) for v in (d_, h, w)]
        ins = [I("x", x), I("w", [cout, cin, k, k, k], fan_in(cin * k ** 3)),
               I("b", [cout], fan_in(cin * k ** 3))]
        vs = [{"x": [vn, vc, vd, vh, vw], "w": [vo, vc, k, k, k], "b": [vo]}
              for (vn, vc, vd, vh, vw, vo) in variants]
        add(c, id, desc, ins, [O("y", out)],
            ref("x, w, b", "return torch.conv3d(x, w, b, [%d, %d, %d], [%d, %d, %d])" %
                (s, s, s, p, p, p)), vs)

    conv3d("l1/conv3d_3x3x3", "Conv3d 3x3x3, padding 1 (32 -> 64 channels).",
           [8, 32, 32, 64, 64], 64, 3, p=1,
           variants=[(2, 5, 7, 9, 11, 6), (1, 2, 4, 3, 5, 3)])
    conv3d("l1/conv3d_pointwise", "Conv3d 1x1x1 (64 -> 128 channels).",
           [8, 64, 32, 64, 64], 128, 1, variants=[(2, 5, 7, 9, 11, 6), (1, 2, 3, 3, 4, 3)])
    conv3d("l1/conv3d_stride2", "Conv3d 3x3x3, stride 2, padding 1 (32 -> 64 channels).",
           [8, 32, 64, 64, 64], 64, 3, s=2, p=1,
           variants=[(2, 5, 7, 9, 11, 6), (1, 2, 5, 4, 6, 3)])

    def convt2d(id, desc, x, cout, k, s=1, p=0, op=0, d=1, g=1, variants=()):
        n, cin, h, w = x
        out = [n, cout, convt_out(h, k, s, p, op, d), convt_out(w, k, s, p, op, d)]
        ins = [I("x", x), I("w", [cin, cout // g, k, k], fan_in(cin // g * k * k)),
               I("b", [cout], fan_in(cin // g * k * k))]
        vs = [{"x": [vn, vc, vh, vw], "w": [vc, vo // g, k, k], "b": [vo]}
              for (vn, vc, vh, vw, vo) in variants]
        add(c, id, desc, ins, [O("y", out)],
            ref("x, w, b", "return torch.conv_transpose2d(x, w, b, [%d, %d], [%d, %d], "
                "[%d, %d], %d, [%d, %d])" % (s, s, p, p, op, op, g, d, d)), vs)

    convt2d("l1/conv_transpose2d_stride2", "Transposed conv2d 3x3, stride 2, padding 1, "
            "output padding 1 (128 -> 64 channels): 2x upsampling.", [32, 128, 64, 64], 64, 3,
            s=2, p=1, op=1, variants=[(2, 5, 9, 11, 7), (1, 3, 4, 3, 4)])
    convt2d("l1/conv_transpose2d_4x4", "Transposed conv2d 4x4, stride 2, padding 1 "
            "(256 -> 128 channels).", [32, 256, 64, 64], 128, 4, s=2, p=1,
            variants=[(2, 5, 9, 11, 7), (1, 3, 4, 3, 4)])
    convt2d("l1/conv_transpose2d_stride1", "Transposed conv2d 3x3, stride 1 (64 -> 64 "
            "channels).", [32, 64, 128, 128], 64, 3, variants=[(2, 5, 9, 11, 7), (1, 3, 4, 3, 4)])
    convt2d("l1/conv_transpose2d_grouped", "Grouped transposed conv2d 3x3, stride 2, 4 groups.",
            [32, 128, 64, 64], 128, 3, s=2, p=1, op=1, g=4,
            variants=[(2, 8, 9, 11, 12), (1, 4, 4, 3, 8)])

    x = [32, 128, 8192]
    add(c, "l1/conv_transpose1d", "Transposed conv1d kernel 4, stride 2, padding 1 "
        "(128 -> 64 channels).",
        [I("x", x), I("w", [128, 64, 4], fan_in(128 * 4)), I("b", [64], fan_in(128 * 4))],
        [O("y", [32, 64, convt_out(8192, 4, 2, 1)])],
        ref("x, w, b", "return torch.conv_transpose1d(x, w, b, [2], [1])"),
        [{"x": [2, 5, 1001], "w": [5, 7, 4], "b": [7]}, {"x": [1, 3, 9], "w": [3, 4, 4], "b": [4]}])
    x = [8, 64, 32, 64, 64]
    add(c, "l1/conv_transpose3d", "Transposed conv3d 3x3x3, stride 2, padding 1, output "
        "padding 1 (64 -> 32 channels).",
        [I("x", x), I("w", [64, 32, 3, 3, 3], fan_in(64 * 27)), I("b", [32], fan_in(64 * 27))],
        [O("y", [8, 32] + [convt_out(v, 3, 2, 1, 1) for v in x[2:]])],
        ref("x, w, b", "return torch.conv_transpose3d(x, w, b, [2, 2, 2], [1, 1, 1], [1, 1, 1])"),
        [{"x": [2, 5, 5, 7, 6], "w": [5, 3, 3, 3, 3], "b": [3]},
         {"x": [1, 2, 3, 3, 4], "w": [2, 3, 3, 3, 3], "b": [3]}])


# ---- other: pooling, losses, data movement --------------------------------------------------------

def other():
    c = "other"
    N, NM, NS = [128, 128, 128, 128], [3, 17, 31, 29], [2, 3, 6, 8]

    def pool2d(id, desc, call, k, s, p=0, d=1):
        out = N[:2] + [conv_out(v, k, s, p, d) for v in N[2:]]
        add(c, id, desc, [I("x", N)], [O("y", out)], ref("x", "return " + call),
            [{"x": NM}, {"x": NS}])

    pool2d("l1/max_pool2d_2x2", "Max pooling 2x2, stride 2.",
           "torch.max_pool2d(x, [2, 2], [2, 2])", 2, 2)
    pool2d("l1/max_pool2d_3x3_pad", "Max pooling 3x3, stride 2, padding 1.",
           "torch.max_pool2d(x, [3, 3], [2, 2], [1, 1])", 3, 2, 1)
    pool2d("l1/max_pool2d_dilated", "Max pooling 3x3, stride 1, dilation 2.",
           "torch.max_pool2d(x, [3, 3], [1, 1], [0, 0], [2, 2])", 3, 1, 0, 2)
    pool2d("l1/avg_pool2d_3x3", "Average pooling 3x3, stride 1, padding 1 (padding counted).",
           "torch.avg_pool2d(x, [3, 3], [1, 1], [1, 1])", 3, 1, 1)
    pool2d("l1/avg_pool2d_2x2", "Average pooling 2x2, stride 2.",
           "torch.avg_pool2d(x, [2, 2], [2, 2])", 2, 2)
    add(c, "l1/adaptive_avg_pool2d", "Adaptive average pooling to 7x7.",
        [I("x", N)], [O("y", N[:2] + [7, 7])],
        ref("x", "return torch.adaptive_avg_pool2d(x, [7, 7])"),
        [{"x": NM}, {"x": [2, 3, 9, 8]}])
    add(c, "l1/adaptive_max_pool2d", "Adaptive max pooling to 4x4 (values).",
        [I("x", N)], [O("y", N[:2] + [4, 4])],
        ref("x", "return torch.adaptive_max_pool2d(x, [4, 4])[0]"),
        [{"x": NM}, {"x": [2, 3, 9, 8]}])
    L = [128, 512, 8192]
    add(c, "l1/max_pool1d", "Max pooling 1-D, kernel 4, stride 4.",
        [I("x", L)], [O("y", [128, 512, 2048])], ref("x", "return torch.max_pool1d(x, [4], [4])"),
        [{"x": [3, 17, 1001]}, {"x": [2, 3, 17]}])
    add(c, "l1/avg_pool1d", "Average pooling 1-D, kernel 5, stride 1, padding 2.",
        [I("x", L)], [O("y", L)], ref("x", "return torch.avg_pool1d(x, [5], [1], [2])"),
        [{"x": [3, 17, 1001]}, {"x": [2, 3, 17]}])
    V = [16, 64, 64, 128, 128]
    add(c, "l1/max_pool3d", "Max pooling 3-D, 2x2x2, stride 2.",
        [I("x", V)], [O("y", [16, 64, 32, 64, 64])],
        ref("x", "return torch.max_pool3d(x, [2, 2, 2], [2, 2, 2])"),
        [{"x": [2, 3, 9, 17, 15]}, {"x": [1, 2, 4, 6, 5]}])
    add(c, "l1/avg_pool3d", "Average pooling 3-D, 3x3x3, stride 2, padding 1.",
        [I("x", V)], [O("y", [16, 64] + [conv_out(v, 3, 2, 1) for v in V[2:]])],
        ref("x", "return torch.avg_pool3d(x, [3, 3, 3], [2, 2, 2], [1, 1, 1])"),
        [{"x": [2, 3, 9, 17, 15]}, {"x": [1, 2, 4, 6, 5]}])

    # Losses, per sample: the elementwise loss reduced over the feature dim, one value per row.
    # Not the usual scalar batch mean: a mean over millions of i.i.d. random terms barely moves
    # from one draw to the next (its spread falls below the tolerance), so a kernel returning a
    # constant would pass. Per-row values move by percents.
    P, M, S = [32768, 4096], [1000, 1537], [7, 33]
    pair = lambda s: {"p": s, "t": s}

    def loss(id, desc, call, ti=None, pi=None, tol=None):
        add(c, id, desc + " Per sample: one value per row.", [I("p", P, pi), I("t", P, ti)],
            [O("loss", [P[0]])], ref("p, t", "return " + call), [pair(M), pair(S)], tol)

    loss("l1/mse_loss", "Mean squared error between predictions and targets.",
         "torch.mean(torch.mse_loss(p, t, 0), 1)")
    loss("l1/l1_loss", "Mean absolute error.", "torch.mean(torch.l1_loss(p, t, 0), 1)")
    loss("l1/smooth_l1_loss", "Smooth L1 loss, beta 1.",
         "torch.mean(torch.smooth_l1_loss(p, t, 0, 1.0), 1)")
    loss("l1/huber_loss", "Huber loss, delta 0.5.", "torch.mean(torch.huber_loss(p, t, 0, 0.5), 1)")
    loss("l1/kl_div_loss", "KL divergence of softmax(t) from softmax(p), summed over classes.",
         "torch.sum(torch.kl_div(torch.log_softmax(p, -1), torch.softmax(t, -1), 0), 1)")
    loss("l1/bce_with_logits_loss", "Binary cross-entropy with logits, targets in [0, 1).",
         "torch.mean(torch.binary_cross_entropy_with_logits(p, t, None, None, 0), 1)",
         uniform(0, 1))
    loss("l1/bce_loss", "Binary cross-entropy of sigmoid(p) against targets in [0, 1).",
         "torch.mean(torch.binary_cross_entropy(torch.sigmoid(p), t, None, 0), 1)", uniform(0, 1))
    loss("l1/soft_margin_loss", "Soft margin loss with targets in {-1, 1}.",
         "torch.mean(torch.soft_margin_loss(p, t * 2 - 1, 0), 1)", randint(0, 2))
    loss("l1/hinge_loss", "Hinge loss clamp(1 - p * y, 0) with y in {-1, 1}.",
         "torch.mean(torch.clamp(1 - p * (t * 2 - 1), 0), 1)", randint(0, 2))
    loss("l1/hinge_embedding_loss", "Hinge embedding loss, margin 1, targets in {-1, 1}.",
         "torch.mean(torch.hinge_embedding_loss(p, t * 2 - 1, 1.0, 0), 1)", randint(0, 2))
    loss("l1/poisson_nll_loss", "Poisson negative log-likelihood with log input, targets "
         "counts in [0, 10).", "torch.mean(torch.poisson_nll_loss(p, t, True, False, 1e-8, 0), 1)",
         randint(0, 10), normal(0, 0.5))
    loss("l1/margin_ranking_loss", "Margin ranking loss max(0, -y * (p - t)), y = sign(p + t).",
         "torch.mean(torch.margin_ranking_loss(p, t, torch.sign(p + t), 0.0, 0), 1)")
    # Class indices: C stays 4096 in every variant, so targets drawn in [0, 4096) stay valid.
    ce = [{"logits": [1000, 4096], "target": [1000]}, {"logits": [5, 4096], "target": [5]}]
    add(c, "l1/cross_entropy_loss", "Cross-entropy of logits [N, C] against class indices, "
        "per sample.",
        [I("logits", P), I("target", [P[0]], randint(0, P[1]), "int64")], [O("loss", [P[0]])],
        ref("logits, target", "return torch.cross_entropy_loss(logits, target, None, 0)"), ce)
    add(c, "l1/cross_entropy_smoothed", "Cross-entropy with label smoothing 0.1, per sample.",
        [I("logits", P), I("target", [P[0]], randint(0, P[1]), "int64")], [O("loss", [P[0]])],
        ref("logits, target",
            "return torch.cross_entropy_loss(logits, target, None, 0, -100, 0.1)"), ce)
    T = [65536, 2048]
    trip = lambda s: {"a": s, "p": s, "n": s}
    add(c, "l1/triplet_margin_loss", "Triplet margin loss, margin 1, L2 distance, per sample.",
        [I("a", T), I("p", T), I("n", T)], [O("loss", [T[0]])],
        ref("a, p, n", "return torch.triplet_margin_loss(a, p, n, 1.0, 2.0, 1e-6, False, 0)"),
        [trip([1000, 257]), trip([7, 33])])
    add(c, "l1/cosine_similarity_loss", "1 - cosine_similarity(a, b) per row.",
        [I("a", T), I("b", T)], [O("loss", [T[0]])],
        ref("a, b", "return 1 - torch.cosine_similarity(a, b, 1, 1e-8)"),
        [{"a": [1000, 257], "b": [1000, 257]}, {"a": [7, 33], "b": [7, 33]}])
    add(c, "l1/mse_loss_none", "Squared error per element (reduction 'none').",
        [I("p", P), I("t", P)], [O("loss", P)], ref("p, t", "return torch.mse_loss(p, t, 0)"),
        [pair(M), pair(S)])

    # Data movement.
    Q, QM, QS = [16384, 8192], [1000, 1537], [7, 33]
    add(c, "l1/transpose_2d", "Materialize the transpose of a 2-D tensor.",
        [I("x", Q)], [O("y", [Q[1], Q[0]])], ref("x", "return x.t().contiguous()"),
        [{"x": QM}, {"x": QS}])
    H = [64, 512, 32, 128]
    add(c, "l1/permute_0213", "Swap dims 1 and 2 of a 4-D tensor (heads <-> sequence).",
        [I("x", H)], [O("y", [64, 32, 512, 128])],
        ref("x", "return x.permute([0, 2, 1, 3]).contiguous()"),
        [{"x": [2, 33, 5, 17]}, {"x": [1, 3, 2, 5]}])
    add(c, "l1/concat_cols", "Concatenate two tensors along the last dim.",
        [I("x", Q), I("y", Q)], [O("z", [Q[0], 2 * Q[1]])], ref("x, y", "return torch.cat([x, y], 1)"),
        [{"x": QM, "y": [1000, 513]}, {"x": QS, "y": [7, 5]}])
    add(c, "l1/gather_rows", "Gather along the last dim with int64 indices.",
        [I("x", Q), I("idx", Q, randint(0, Q[1]), "int64")], [O("y", Q)],
        ref("x, idx", "return torch.gather(x, 1, idx)"),
        [{"x": [1000, 8192], "idx": [1000, 700]}, {"x": [3, 8192], "idx": [3, 9]}])
    add(c, "l1/embedding", "Embedding lookup: rows of a 65536 x 1024 table by int64 index.",
        [I("table", [65536, 1024]), I("idx", [131072], randint(0, 65536), "int64")],
        [O("y", [131072, 1024])], ref("table, idx", "return torch.embedding(table, idx)"),
        [{"table": [65536, 129], "idx": [3001]}, {"table": [65536, 3], "idx": [13]}])
    add(c, "l1/flip_cols", "Reverse the order of the last dim.",
        [I("x", Q)], [O("y", Q)], ref("x", "return torch.flip(x, [1])"), [{"x": QM}, {"x": QS}])
    add(c, "l1/roll_cols", "Roll the last dim by 17 positions.",
        [I("x", Q)], [O("y", Q)], ref("x", "return torch.roll(x, [17], [1])"),
        [{"x": QM}, {"x": QS}])
    add(c, "l1/tril", "Keep the lower triangle (diagonal included) of each matrix.",
        [I("x", [32, 2048, 2048])], [O("y", [32, 2048, 2048])], ref("x", "return torch.tril(x)"),
        [{"x": [3, 257, 129]}, {"x": [2, 5, 6]}])
    add(c, "l1/constant_pad", "Zero-pad H by (2, 2) and W by (1, 1) of an NCHW tensor.",
        [I("x", N)], [O("y", [128, 128, 132, 130])],
        ref("x", "return torch.constant_pad_nd(x, [1, 1, 2, 2], 0.0)"),
        [{"x": NM}, {"x": NS}])
    add(c, "l1/pixel_shuffle", "Pixel shuffle, upscale 2: [N, 4C, H, W] -> [N, C, 2H, 2W].",
        [I("x", [64, 256, 128, 128])], [O("y", [64, 64, 256, 256])],
        ref("x", "return torch.pixel_shuffle(x, 2)"),
        [{"x": [3, 20, 17, 13]}, {"x": [2, 4, 3, 5]}])
    add(c, "l1/upsample_nearest2d", "Nearest-neighbour upsampling to 2x H and W.",
        [I("x", [64, 128, 128, 128])], [O("y", [64, 128, 256, 256])],
        ref("x", "return torch.upsample_nearest2d(x, [x.size(2) * 2, x.size(3) * 2])"),
        [{"x": NM}, {"x": NS}])
    add(c, "l1/upsample_bilinear2d", "Bilinear upsampling to 2x H and W (align_corners False).",
        [I("x", [64, 128, 128, 128])], [O("y", [64, 128, 256, 256])],
        ref("x", "return torch.upsample_bilinear2d(x, [x.size(2) * 2, x.size(3) * 2], False)"),
        [{"x": NM}, {"x": NS}])
    add(c, "l1/topk_values", "The 16 largest values of each row, in descending order.",
        [I("x", Q)], [O("y", [Q[0], 16])], ref("x", "return torch.topk(x, 16, 1)[0]"),
        [{"x": QM}, {"x": [7, 40]}])
    add(c, "l1/sort_rows", "Sort each row ascending (values).",
        [I("x", [16384, 4096])], [O("y", [16384, 4096])], ref("x", "return torch.sort(x, 1)[0]"),
        [{"x": QM}, {"x": QS}])


# ---- fused chains ---------------------------------------------------------------------------

def fused():
    c = "fused"
    Mx, K, N = 8192, 4096, 4096
    mK, mN = 257, 129   # medium
    sK, sN = 16, 8      # small

    def gemm_chain(id, desc, body, out_shape=None, extra=(), extra_args="", tol=None,
                   small_rows=9, mn=mN, sn=sN, bias=True):
        """x[M, K] -> torch.linear(x, w, b) -> body; body uses `y` and names in extra_args.
        Without bias when a normalization follows: it would cancel the bias (a degenerate input)."""
        ins = [I("x", [Mx, K]), I("w", [N, K], fan_in(K))]
        vm = {"x": [1000, mK], "w": [mn, mK]}
        vs = {"x": [small_rows, sK], "w": [sn, sK]}
        if bias:
            # Wider than fan_in(K): a bias of +-1/64 moves a row-wise softmax, logsumexp or sum
            # by less than the tolerance, so a kernel could drop it.
            ins.append(I("b", [N], uniform(-0.5, 0.5)))
            vm["b"], vs["b"] = [mn], [sn]
        for name, shape_fn, init in extra:
            ins.append(I(name, shape_fn(Mx, N), init))
            vm[name] = shape_fn(1000, mn)
            vs[name] = shape_fn(small_rows, sn)
        args = ("x, w, b" if bias else "x, w") + (", " + extra_args if extra_args else "")
        lines = ["y = torch.linear(x, w%s)" % (", b" if bias else "")] + body
        add(c, id, desc, ins, [O("out", out_shape or [Mx, N])], ref(args, *lines), [vm, vs], tol)

    gemm_chain("l2/gemm_bias_relu", "Linear (x @ W^T + b) then ReLU.", ["return torch.relu(y)"])
    gemm_chain("l2/gemm_bias_gelu", "Linear then GELU.", ["return torch.gelu(y)"])
    gemm_chain("l2/gemm_bias_silu", "Linear then SiLU.", ["return torch.silu(y)"])
    gemm_chain("l2/gemm_sigmoid_sum", "Linear, sigmoid, then sum over features.",
               ["return torch.sum(torch.sigmoid(y), 1)"], out_shape=[Mx], tol=(1e-3, 1e-4))
    gemm_chain("l2/gemm_softmax", "Linear then softmax over features.",
               ["return torch.softmax(y, -1)"], tol=PROB)
    gemm_chain("l2/gemm_tanh_scale_clamp", "Linear, tanh, times 2.5, clamp to [-1, 1].",
               ["return torch.clamp(torch.tanh(y) * 2.5, -1.0, 1.0)"])
    gemm_chain("l2/gemm_mish_mish", "Linear then Mish twice.", ["return torch.mish(torch.mish(y))"])
    gemm_chain("l2/gemm_layernorm_gelu", "Linear, LayerNorm over features, GELU.",
               ["return torch.gelu(torch.layer_norm(y, [y.size(1)]))"])
    gemm_chain("l2/gemm_max_sub_gelu", "Linear, subtract the row max, GELU (KernelBench-style).",
               ["return torch.gelu(y - torch.amax(y, 1, keepdim=True))"])
    gemm_chain("l2/gemm_scale_residual", "Linear, then y * s + y with a per-feature scale s.",
               ["return y * s + y"], extra=[("s", lambda m, n: [n], uniform(0.5, 1.5))],
               extra_args="s")
    gemm_chain("l2/gemm_batchnorm_relu", "Linear (no bias), BatchNorm1d (training statistics), ReLU.",
               ["return torch.relu(torch.batch_norm(y, None, None, None, None, True, 0.1, 1e-5, "
                "False))"], bias=False)
    gemm_chain("l2/gemm_groupnorm_swish", "Linear (no bias), GroupNorm (8 groups), swish, multiply, swish "
               "(KernelBench's Gemm_GroupNorm_Swish_Multiply_Swish).",
               ["z = torch.group_norm(y, 8, None, None, 1e-5)", "z = z * torch.sigmoid(z) * m",
                "return z * torch.sigmoid(z)"],
               extra=[("m", lambda m, n: [n], uniform(0.5, 1.5))], extra_args="m", mn=136, sn=32,
               bias=False)
    gemm_chain("l2/gemm_logsumexp", "Linear then logsumexp over features.",
               ["return torch.logsumexp(y, [1])"], out_shape=[Mx])
    gemm_chain("l2/gemm_residual_layernorm", "Linear plus residual r, then LayerNorm.",
               ["return torch.layer_norm(y + r, [y.size(1)])"],
               extra=[("r", lambda m, n: [m, n], None)], extra_args="r")

    add(c, "l2/mlp_gelu", "Two-layer MLP: linear, GELU, linear (4096 -> 8192 -> 4096).",
        [I("x", [8192, 4096]), I("w1", [8192, 4096], fan_in(4096)), I("b1", [8192], fan_in(4096)),
         I("w2", [4096, 8192], fan_in(8192)), I("b2", [4096], fan_in(8192))],
        [O("y", [8192, 4096])],
        ref("x, w1, b1, w2, b2", "return torch.linear(torch.gelu(torch.linear(x, w1, b1)), w2, b2)"),
        [{"x": [1000, 129], "w1": [257, 129], "b1": [257], "w2": [127, 257], "b2": [127]},
         {"x": [9, 8], "w1": [16, 8], "b1": [16], "w2": [8, 16], "b2": [8]}])
    add(c, "l2/swiglu_mlp", "SwiGLU MLP: (silu(x W1^T) * x W3^T) W2^T (2048 -> 5632 -> 2048).",
        [I("x", [8192, 2048]), I("w1", [5632, 2048], fan_in(2048)),
         I("w3", [5632, 2048], fan_in(2048)), I("w2", [2048, 5632], fan_in(5632))],
        [O("y", [8192, 2048])],
        ref("x, w1, w3, w2",
            "return torch.linear(torch.silu(torch.linear(x, w1)) * torch.linear(x, w3), w2)"),
        # Small variant with K = 256 and 256 hidden: with K = 8 the fan-in-scaled weights of the
        # primary shapes make the output ~1e-5, inside atol.
        [{"x": [1000, 129], "w1": [257, 129], "w3": [257, 129], "w2": [129, 257]},
         {"x": [9, 256], "w1": [256, 256], "w3": [256, 256], "w2": [8, 256]}])
    q = [16, 16, 1024, 64]
    qkv = lambda s: {"q": s, "k": s, "v": s}
    add(c, "l2/attention", "Scaled dot-product attention softmax(Q K^T / sqrt(d)) V, no mask.",
        [I("q", q), I("k", q), I("v", q)], [O("o", q)],
        ref("q, k, v", "s = torch.matmul(q, k.transpose(-2, -1)) / (q.size(-1) ** 0.5)",
            "return torch.matmul(torch.softmax(s, -1), v)"),
        [qkv([2, 3, 33, 17]), qkv([1, 2, 5, 4])])
    add(c, "l2/causal_attention", "Causal scaled dot-product attention (future keys masked).",
        [I("q", q), I("k", q), I("v", q)], [O("o", q)],
        ref("q, k, v", "L = q.size(-2)",
            "s = torch.matmul(q, k.transpose(-2, -1)) / (q.size(-1) ** 0.5)",
            "mask = torch.triu(torch.ones([L, L], device=q.device), 1) > 0.5",
            "s = torch.masked_fill(s, mask, float('-inf'))",
            "return torch.matmul(torch.softmax(s, -1), v)"),
        [qkv([2, 3, 33, 17]), qkv([1, 2, 5, 4])])
    add(c, "l2/bmm_softmax", "Batched Q K^T followed by softmax over keys.",
        [I("q", [256, 1024, 64]), I("k", [256, 1024, 64], fan_in(64))], [O("p", [256, 1024, 1024])],
        ref("q, k", "return torch.softmax(torch.bmm(q, k.transpose(1, 2)), -1)"),
        [{"q": [3, 33, 17], "k": [3, 31, 17]}, {"q": [2, 5, 4], "k": [2, 6, 4]}], PROB)
    R = [8, 32, 4096, 128]
    add(c, "l2/rotary_embedding", "Rotary position embedding: x * cos + rotate_half(x) * sin.",
        [I("x", R), I("cos", R[2:], uniform(-1, 1)), I("sin", R[2:], uniform(-1, 1))], [O("y", R)],
        ref("x, cos, sin", "h = x.size(-1) // 2",
            "rot = torch.cat([-x[..., h:], x[..., :h]], -1)",
            "return x * cos + rot * sin"),
        [{"x": [2, 3, 33, 18], "cos": [33, 18], "sin": [33, 18]},
         {"x": [1, 2, 5, 4], "cos": [5, 4], "sin": [5, 4]}])

    # Elementwise chains.
    P, M, S = ROWS
    add(c, "l2/bias_gelu", "Add a bias row, then GELU.",
        [I("x", P), I("b", [P[1]])], [O("y", P)], ref("x, b", "return torch.gelu(x + b)"),
        [{"x": M, "b": [M[1]]}, {"x": S, "b": [S[1]]}])
    add(c, "l2/add_relu_mul", "relu(x + y) * z.",
        [I("x", P), I("y", P), I("z", P)], [O("out", P)],
        ref("x, y, z", "return torch.relu(x + y) * z"),
        [{"x": M, "y": M, "z": M}, {"x": S, "y": S, "z": S}])
    add(c, "l2/scale_mask_softmax", "softmax(x * 0.125 + mask) over the last dim.",
        [I("x", P), I("mask", P, uniform(-4, 0))], [O("y", P)],
        ref("x, mask", "return torch.softmax(x * 0.125 + mask, -1)"),
        [{"x": M, "mask": M}, {"x": S, "mask": S}], PROB)
    add(c, "l2/residual_layernorm", "LayerNorm(x + r) with weight and bias.",
        [I("x", P), I("r", P), I("w", [P[1]], uniform(0.5, 1.5)), I("b", [P[1]], uniform(-.5, .5))],
        [O("y", P)], ref("x, r, w, b", "return torch.layer_norm(x + r, [x.size(-1)], w, b)"),
        [{"x": M, "r": M, "w": [M[1]], "b": [M[1]]}, {"x": S, "r": S, "w": [S[1]], "b": [S[1]]}])
    add(c, "l2/residual_rmsnorm", "RMSNorm(x + r) * w, also returning the sum x + r.",
        [I("x", P), I("r", P), I("w", [P[1]], uniform(0.5, 1.5))], [O("y", P), O("h", P)],
        ref("x, r, w", "h = x + r",
            "return h * torch.rsqrt(torch.mean(h * h, -1, keepdim=True) + 1e-6) * w, h"),
        [{"x": M, "r": M, "w": [M[1]]}, {"x": S, "r": S, "w": [S[1]]}])
    add(c, "l2/log_softmax_nll", "Cross-entropy written out: log_softmax then NLL, per sample.",
        [I("x", [32768, 4096]), I("t", [32768], randint(0, 4096), "int64")], [O("loss", [32768])],
        ref("x, t", "return torch.nll_loss(torch.log_softmax(x, 1), t, None, 0)"),
        [{"x": [1000, 4096], "t": [1000]}, {"x": [5, 4096], "t": [5]}])

    # Convolution chains (2-D unless stated): x[N, Cin, H, W], w[Cout, Cin, 3, 3], b[Cout].
    X, Co = [32, 64, 128, 128], 128
    XM, CoM = [2, 5, 17, 19], 7
    XS, CoS = [1, 3, 6, 5], 4

    def conv_chain(id, desc, body, out_hw=None, out_c=None, extra=(), extra_args="", k=3, p=1,
                   tol=None, small=None, out_shape=None, com=CoM, cos=CoS, bias=True):
        """x -> torch.conv2d(x, w, b, padding p) -> body; body uses `y` and extra_args.
        Without bias when a normalization follows: it would cancel the bias (a degenerate input)."""
        xs = small or XS
        ins = [I("x", X), I("w", [Co, X[1], k, k], fan_in(X[1] * k * k))]
        vm = {"x": XM, "w": [com, XM[1], k, k]}
        vs = {"x": xs, "w": [cos, xs[1], k, k]}
        if bias:
            ins.append(I("b", [Co], fan_in(X[1] * k * k)))
            vm["b"], vs["b"] = [com], [cos]
        for name, shape_fn, init in extra:
            ins.append(I(name, shape_fn(Co), init))
            vm[name] = shape_fn(com)
            vs[name] = shape_fn(cos)
        h, w = conv_out(X[2], k, 1, p), conv_out(X[3], k, 1, p)
        if out_hw:
            h, w = out_hw(h, w)
        shape = out_shape or [X[0], out_c if out_c is not None else Co, h, w]
        args = ("x, w, b" if bias else "x, w") + (", " + extra_args if extra_args else "")
        lines = ["y = torch.conv2d(x, w, %s, [1, 1], [%d, %d])" % ("b" if bias else "None", p, p)]
        lines += body
        add(c, id, desc, ins, [O("out", shape)], ref(args, *lines), [vm, vs], tol)

    conv_chain("l2/conv2d_relu", "Conv2d 3x3 then ReLU.", ["return torch.relu(y)"])
    conv_chain("l2/conv2d_batchnorm_relu", "Conv2d 3x3 (no bias), BatchNorm (training statistics), ReLU.",
               ["return torch.relu(torch.batch_norm(y, g, beta, None, None, True, 0.1, 1e-5, "
                "False))"],
               extra=[("g", lambda co: [co], uniform(0.5, 1.5)),
                      ("beta", lambda co: [co], uniform(-0.5, 0.5))], extra_args="g, beta",
               small=[3, 3, 6, 5], bias=False)
    conv_chain("l2/conv2d_groupnorm_gelu", "Conv2d 3x3, GroupNorm (4 groups), GELU.",
               ["return torch.gelu(torch.group_norm(y, 4, None, None, 1e-5))"],
               small=[2, 3, 6, 5], com=8, cos=8)
    conv_chain("l2/conv2d_relu_maxpool", "Conv2d 3x3, ReLU, max pool 2x2.",
               ["return torch.max_pool2d(torch.relu(y), [2, 2], [2, 2])"],
               out_hw=lambda h, w: (h // 2, w // 2))
    conv_chain("l2/conv2d_bias_scale_sigmoid", "Conv2d 3x3, add a per-channel bias, scale, "
               "sigmoid.", ["return torch.sigmoid((y + cb) * 0.5)"],
               extra=[("cb", lambda co: [co, 1, 1], None)], extra_args="cb")
    conv_chain("l2/conv2d_hardswish_relu", "Conv2d 3x3, HardSwish, ReLU.",
               ["return torch.relu(torch.hardswish(y))"])
    conv_chain("l2/conv2d_mish_tanh", "Conv2d 3x3, Mish, tanh.",
               ["return torch.tanh(torch.mish(y))"])
    conv_chain("l2/conv2d_instancenorm_div", "Conv2d 3x3 (no bias), InstanceNorm, divide by 2.",
               ["return torch.instance_norm(y, None, None, None, None, True, 0.1, 1e-5, False) "
                "/ 2.0"], bias=False)
    conv_chain("l2/conv2d_min_tanh_tanh", "Conv2d 3x3, min over channels, tanh twice "
               "(KernelBench's Conv2d_Min_Tanh_Tanh).",
               ["return torch.tanh(torch.tanh(torch.amin(y, 1, keepdim=True)))"], out_c=1)
    # Summed over H and W only: a sum over C too (KernelBench's version) adds up 500k sigmoids
    # whose total hardly moves between draws, so a constant would pass.
    conv_chain("l2/conv2d_avgpool_sigmoid_sum", "Conv2d 3x3, average pool 2x2, sigmoid, sum over "
               "H and W.", ["return torch.sum(torch.sigmoid(torch.avg_pool2d(y, [2, 2], [2, 2])), "
                            "[2, 3])"],
               out_shape=[X[0], Co], small=[2, 3, 6, 5])
    conv_chain("l2/conv2d_sub_hardswish_maxpool_mish", "Conv2d 3x3, subtract 0.5, HardSwish, max "
               "pool 2x2, Mish.",
               ["return torch.mish(torch.max_pool2d(torch.hardswish(y - 0.5), [2, 2], [2, 2]))"],
               out_hw=lambda h, w: (h // 2, w // 2))
    XR = [32, 64, 128, 128]
    add(c, "l2/conv2d_residual_relu", "Conv2d 3x3 keeping the channels, plus the input, ReLU.",
        [I("x", XR), I("w", [64, 64, 3, 3], fan_in(64 * 9)), I("b", [64], fan_in(64 * 9))],
        [O("y", XR)], ref("x, w, b", "return torch.relu(torch.conv2d(x, w, b, [1, 1], [1, 1]) + x)"),
        [{"x": [2, 5, 17, 19], "w": [5, 5, 3, 3], "b": [5]},
         {"x": [1, 3, 6, 5], "w": [3, 3, 3, 3], "b": [3]}])
    add(c, "l2/depthwise_separable_conv", "Depthwise 3x3 conv, then pointwise 1x1 conv, then "
        "ReLU (MobileNet block).",
        [I("x", [32, 128, 128, 128]), I("wd", [128, 1, 3, 3], fan_in(9)),
         I("wp", [256, 128, 1, 1], fan_in(128))], [O("y", [32, 256, 128, 128])],
        ref("x, wd, wp", "y = torch.conv2d(x, wd, None, [1, 1], [1, 1], [1, 1], x.size(1))",
            "return torch.relu(torch.conv2d(y, wp))"),
        [{"x": [2, 5, 17, 19], "wd": [5, 1, 3, 3], "wp": [7, 5, 1, 1]},
         {"x": [1, 3, 6, 5], "wd": [3, 1, 3, 3], "wp": [4, 3, 1, 1]}])
    X3 = [8, 32, 32, 64, 64]
    add(c, "l2/conv3d_relu_leakyrelu_gelu_sigmoid", "Conv3d 3x3x3, then ReLU, LeakyReLU, GELU, "
        "sigmoid and a bias (KernelBench's Conv3d_ReLU_LeakyReLU_GELU_Sigmoid_BiasAdd).",
        [I("x", X3), I("w", [64, 32, 3, 3, 3], fan_in(32 * 27)), I("b", [64], fan_in(32 * 27)),
         I("bias", [64, 1, 1, 1], normal(0, 0.1))],
        [O("y", [8, 64, 30, 62, 62])],
        ref("x, w, b, bias", "y = torch.conv3d(x, w, b)",
            "y = torch.gelu(torch.leaky_relu(torch.relu(y), 0.01))",
            "return torch.sigmoid(y) + bias"),
        [{"x": [2, 5, 7, 9, 11], "w": [6, 5, 3, 3, 3], "b": [6], "bias": [6, 1, 1, 1]},
         {"x": [1, 2, 4, 3, 5], "w": [3, 2, 3, 3, 3], "b": [3], "bias": [3, 1, 1, 1]}])
    # Not KernelBench's Conv3d_GroupNorm_Mean: a mean over GroupNorm's output is the mean of its
    # bias whatever the input, the kind of degenerate task the checks reject.
    add(c, "l2/conv3d_groupnorm_relu", "Conv3d 3x3x3, GroupNorm (8 groups), ReLU.",
        [I("x", X3), I("w", [64, 32, 3, 3, 3], fan_in(32 * 27)), I("b", [64], fan_in(32 * 27))],
        [O("y", [8, 64, 30, 62, 62])],
        ref("x, w, b", "y = torch.group_norm(torch.conv3d(x, w, b), 8, None, None, 1e-5)",
            "return torch.relu(y)"),
        [{"x": [2, 5, 7, 9, 11], "w": [16, 5, 3, 3, 3], "b": [16]},
         {"x": [1, 2, 4, 3, 5], "w": [16, 2, 3, 3, 3], "b": [16]}])
    XT = [32, 128, 64, 64]
    add(c, "l2/conv_transpose2d_bias_tanh", "Transposed conv2d 4x4 stride 2 (2x upsampling), "
        "subtract a per-channel bias, tanh.",
        [I("x", XT), I("w", [128, 64, 4, 4], fan_in(128 * 16)), I("b", [64], fan_in(128 * 16)),
         I("bias", [64, 1, 1], normal(0, 0.5))],
        [O("y", [32, 64, 128, 128])],
        ref("x, w, b, bias", "y = torch.conv_transpose2d(x, w, b, [2, 2], [1, 1])",
            "return torch.tanh(y - bias)"),
        [{"x": [2, 5, 9, 11], "w": [5, 7, 4, 4], "b": [7], "bias": [7, 1, 1]},
         {"x": [1, 3, 4, 3], "w": [3, 4, 4, 4], "b": [4], "bias": [4, 1, 1]}])
    add(c, "l2/conv_transpose2d_gelu_groupnorm", "Transposed conv2d 3x3 stride 2, GELU, "
        "GroupNorm (8 groups).",
        [I("x", XT), I("w", [128, 64, 3, 3], fan_in(128 * 9)), I("b", [64], fan_in(128 * 9))],
        [O("y", [32, 64, 127, 127])],
        ref("x, w, b", "y = torch.gelu(torch.conv_transpose2d(x, w, b, [2, 2], [1, 1]))",
            "return torch.group_norm(y, 8, None, None, 1e-5)"),
        [{"x": [2, 5, 9, 11], "w": [5, 16, 3, 3], "b": [16]},
         {"x": [2, 3, 4, 3], "w": [3, 8, 3, 3], "b": [8]}])
    X3T = [8, 64, 16, 32, 32]
    add(c, "l2/conv_transpose3d_batchnorm_avgpool", "Transposed conv3d 3x3x3 stride 2 (no bias), "
        "BatchNorm (training statistics), average pool 2x2x2.",
        [I("x", X3T), I("w", [64, 32, 3, 3, 3], fan_in(64 * 27))],
        [O("y", [8, 32, 16, 32, 32])],
        ref("x, w", "y = torch.conv_transpose3d(x, w, None, [2, 2, 2], [1, 1, 1], [1, 1, 1])",
            "y = torch.batch_norm(y, None, None, None, None, True, 0.1, 1e-5, False)",
            "return torch.avg_pool3d(y, [2, 2, 2], [2, 2, 2])"),
        [{"x": [2, 5, 5, 7, 6], "w": [5, 3, 3, 3, 3]}, {"x": [2, 2, 3, 3, 4], "w": [2, 3, 3, 3, 3]}])
    add(c, "l2/conv1d_gelu_layernorm", "Conv1d kernel 3 (padding 1), GELU, LayerNorm over "
        "channels (transposed to the last dim).",
        [I("x", [32, 256, 8192]), I("w", [256, 256, 3], fan_in(256 * 3)),
         I("b", [256], fan_in(256 * 3))], [O("y", [32, 8192, 256])],
        ref("x, w, b", "y = torch.gelu(torch.conv1d(x, w, b, [1], [1])).transpose(1, 2)",
            "return torch.layer_norm(y, [y.size(-1)])"),
        [{"x": [2, 5, 1001], "w": [7, 5, 3], "b": [7]}, {"x": [1, 3, 9], "w": [4, 3, 3], "b": [4]}])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    for f in (elementwise, reduction, normalization, gemm, conv, other, fused):
        f()
    total = 0
    for category, tasks in TASKS.items():
        path = os.path.join(args.out, category + ".jsonl")
        with open(path, "w") as fh:
            for t in tasks:
                fh.write(json.dumps(t, separators=(", ", ": ")) + "\n")
        print("%-14s %3d tasks -> %s" % (category, len(tasks), path))
        total += len(tasks)
    print("total %d" % total)


if __name__ == "__main__":
    main()
