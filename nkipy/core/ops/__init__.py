"""nkipy ops: the kernel language's operations.

Each op runs plain NumPy when called outside a traced kernel (the CPU reference)
and records IR while a kernel is traced. NumPy's own functions, ufuncs and
operators on traced tensors dispatch here too (see ``_dispatch.FUNCTIONS``).
The nkipy extras beyond NumPy are softmax, log_softmax, rms_norm, topk, conv2d,
conv3d, sigmoid, erf, erfc, lgamma, rsqrt, constant/zeros/full, static_slice,
dynamic_update_slice, scatter_along_axis, scatter_strided, philox (counter-based
random words) and the collectives.

The modules form layers, each importing only those below it (an import-linter
contract in pyproject.toml keeps it so): ``_builder`` (IR nodes) <- ``_core``
(dispatcher, operands, assignment) <- ``_elementwise`` (ufuncs) <- the op
modules (binary, unary, creation, reduce, linalg, nn, conv, transform, indexing,
random, collectives) <- ``_dispatch`` (NumPy's protocols).
"""
from nkipy.core.ops._core import NKIPyUnsupportedError, nkipy_op
from nkipy.core.trace import get_backend
from nkipy.core.ops.binary import (
    add, arctan2, bitwise_and, copysign, fmod, bitwise_or, bitwise_xor, divide, equal, floor_divide, fmax, fmin,
    greater, greater_equal, hypot, less, less_equal, logaddexp, logical_and, logical_or,
    logical_xor, maximum, minimum, mod, multiply, not_equal, power, remainder, subtract,
    true_divide,
)
from nkipy.core.ops.unary import (
    abs, absolute, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, around, bitwise_not, ceil,
    clip, cos, cosh, deg2rad, erf, erfc, exp, exp2, expm1, fabs, floor, invert, isfinite, isinf,
    isnan, lgamma, log, log1p, log2, log10, logical_not, negative, positive, rad2deg, reciprocal,
    rint, round, round_, rsqrt, sigmoid, sign, signbit, sin, sinh, sqrt, square, tan, tanh, trunc,
)
from nkipy.core.ops.creation import (
    arange, constant, diag, empty, empty_like, eye, full, full_like, identity, ones, ones_like,
    tril, triu, zeros, zeros_like,
)
from nkipy.core.ops.linalg import dot, inner, matmul, norm, outer, trace, vdot
from nkipy.core.ops.nn import log_softmax, rms_norm, softmax, topk
from nkipy.core.ops.conv import conv2d, conv3d
from nkipy.core.ops.reduce import (
    all, amax, amin, any, argmax, argmin, count_nonzero, cumprod, cumsum, max, mean, min, prod,
    std, sum, var,
)
from nkipy.core.ops.transform import (
    array_split, astype, atleast_1d, atleast_2d, atleast_3d, broadcast_to, concat, concatenate,
    copy, copyto, diff, expand_dims, flip, fliplr, flipud, hstack, moveaxis, pad, permute_dims,
    ravel, repeat, reshape, roll, split, squeeze, stack, swapaxes, tile, transpose, vstack,
)
from nkipy.core.ops.indexing import (
    check_index, dynamic_update_slice, put_along_axis, scatter_along_axis, scatter_strided,
    static_slice, take, take_along_axis, where,
)
from nkipy.core.ops._builder import op_context
from nkipy.core.ops.collectives import all_gather, all_reduce, all_to_all, reduce_scatter
from nkipy.core.ops.random import fail_if, philox

__all__ = [
    "NKIPyUnsupportedError", "nkipy_op", "get_backend",
    # binary
    "add", "subtract", "multiply", "divide", "true_divide", "power", "maximum", "minimum",
    "fmax", "fmin", "bitwise_and", "bitwise_or", "bitwise_xor", "equal", "not_equal", "greater",
    "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor",
    "logaddexp", "remainder", "mod", "floor_divide", "arctan2", "hypot", "fmod", "copysign",
    # unary
    "abs", "absolute", "fabs", "exp", "exp2", "log", "log10", "sqrt", "square", "negative",
    "positive", "reciprocal", "sin", "cos", "tan", "arctan", "arcsin", "arccos", "sinh", "cosh",
    "tanh", "ceil", "floor", "rint", "trunc", "sign", "invert", "bitwise_not", "logical_not",
    "clip", "log1p", "log2", "expm1", "round_", "round", "around", "isnan", "isfinite", "isinf",
    "deg2rad", "rad2deg", "sigmoid", "erf", "rsqrt", "arcsinh", "arccosh", "arctanh", "erfc",
    "lgamma", "signbit",
    # creation
    "constant", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
    "full_like", "tril", "triu", "diag", "eye", "identity", "arange",
    # linalg
    "dot", "vdot", "inner", "matmul", "norm", "outer", "trace",
    # reductions
    "sum", "prod", "max", "min", "amax", "amin", "mean", "var", "std", "any", "all", "argmax",
    "argmin", "cumsum", "cumprod", "count_nonzero",
    # transforms
    "reshape", "ravel", "transpose", "permute_dims", "swapaxes", "moveaxis", "expand_dims",
    "squeeze", "concatenate", "concat", "stack", "hstack", "vstack", "split", "array_split",
    "copy", "repeat", "tile", "broadcast_to", "copyto", "astype", "pad", "diff", "flip",
    "fliplr", "flipud", "roll", "atleast_1d", "atleast_2d", "atleast_3d",
    # nn / conv
    "softmax", "log_softmax", "rms_norm", "topk", "conv2d", "conv3d",
    # indexing
    "where", "take", "take_along_axis", "put_along_axis", "scatter_along_axis",
    "static_slice", "dynamic_update_slice", "scatter_strided", "check_index", "op_context",
    # collectives
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "philox", "fail_if",
]
