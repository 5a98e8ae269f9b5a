"""C text: dtypes as C types, scalars as C literals, elementwise operators and
reductions as C expressions and statements, and the text helpers every loop
body shares (leaf substitution, local pointer copies)."""
from __future__ import annotations

import math

import numpy as np

from nkipy.core.ir import BINARY, UNARY, Node, dtype_name


class CodegenError(NotImplementedError):
    """An IR construct this code generator cannot compile."""


# ---- dtypes -----------------------------------------------------------------

_STORAGE = {
    "float32": "float", "float16": "nk_f16", "bfloat16": "nk_bf16", "int8": "int8_t",
    "int16": "int16_t", "int32": "int32_t", "uint8": "uint8_t", "uint16": "uint16_t",
    "uint32": "uint32_t", "bool": "uint8_t", "int64": "int64_t", "float64": "double",
    "float8_e4m3fn": "uint8_t", "float8_e5m2": "uint8_t", "float8_e4m3": "uint8_t",
}

#: The 8-bit floats (stored as bytes, computed in float; nkipy_prelude.h):
#: name -> (prelude prefix, exponent bits, mantissa bits, fn (no infinities),
#: NumPy's (ml_dtypes') NaN code, PyTorch saturates overflow, PyTorch's NaN code).
FLOAT8 = {
    "float8_e4m3fn": ("e4m3fn", 4, 3, 1, 0x7F, 1, 0x7F),
    "float8_e5m2": ("e5m2", 5, 2, 0, 0x7E, 0, 0x7F),
    "float8_e4m3": ("e4m3", 4, 3, 0, 0x7C, 0, 0x7C),
}


_NKRT_DTYPE = {
    "float32": "NKRT_DTYPE_FLOAT32", "float16": "NKRT_DTYPE_FLOAT16",
    "bfloat16": "NKRT_DTYPE_BFLOAT16", "int8": "NKRT_DTYPE_INT8", "uint8": "NKRT_DTYPE_UINT8",
    "int16": "NKRT_DTYPE_INT16", "uint16": "NKRT_DTYPE_UINT16", "int32": "NKRT_DTYPE_INT32",
    "uint32": "NKRT_DTYPE_UINT32", "bool": "NKRT_DTYPE_BOOL", "int64": "NKRT_DTYPE_INT64",
    "float64": "NKRT_DTYPE_FLOAT64", "float8_e4m3fn": "NKRT_DTYPE_FLOAT8_E4M3FN",
    "float8_e5m2": "NKRT_DTYPE_FLOAT8_E5M2", "float8_e4m3": "NKRT_DTYPE_FLOAT8_E4M3",
}


def storage_type(dtype: np.dtype) -> str:
    return _STORAGE[dtype_name(dtype)]


def is_float(dtype: np.dtype) -> bool:
    name = dtype_name(dtype)
    return name in ("float32", "float16", "bfloat16", "float64") or name in FLOAT8


def is_double(dtype: np.dtype) -> bool:
    return dtype_name(dtype) == "float64"


def compute_type(dtype: np.dtype) -> str:
    """The C type expressions of this dtype are computed in (64-bit types in
    64 bits: int64 as int64_t, float64 as double)."""
    name = dtype_name(dtype)
    if name in ("float32", "float16", "bfloat16") or name in FLOAT8:
        return "float"
    if name == "float64":
        return "double"
    if name == "int64":
        return "int64_t"
    if name == "uint32":
        return "uint32_t"
    return "int32_t"


def load_expr(dtype: np.dtype, ref: str) -> str:
    """C expression reading storage `ref` as the compute type."""
    name = dtype_name(dtype)
    if name == "bfloat16":
        return f"nk_bf2f({ref})"
    if name in FLOAT8:
        return f"nk_{FLOAT8[name][0]}_load({ref})"
    if name == "float16":
        return f"(float)({ref})"
    return f"({compute_type(dtype)})({ref})"


def store_expr(dtype: np.dtype, value: str) -> str:
    """C expression converting a compute-type value to storage."""
    name = dtype_name(dtype)
    if name == "bfloat16":
        return f"nk_f2bf({value})"
    if name in FLOAT8:
        return f"nk_{FLOAT8[name][0]}_store({value})"
    if name == "bool":
        return f"(uint8_t)(({value}) != 0)"
    return f"({storage_type(dtype)})({value})"


def c_literal(value, dtype: np.dtype) -> str:
    """A scalar as a C literal in the compute type of dtype."""
    name = dtype_name(dtype)
    if name == "float64":
        d = float(np.asarray(value).astype(np.float64))
        if math.isnan(d):
            return "__builtin_nan(\"\")"
        if math.isinf(d):
            return "__builtin_inf()" if d > 0 else "(-__builtin_inf())"
        return f"{d!r}"
    if is_float(dtype):
        v = float(np.asarray(value).astype(np.float32))
        if math.isnan(v):
            return "__builtin_nanf(\"\")"
        if math.isinf(v):
            return "__builtin_inff()" if v > 0 else "(-__builtin_inff())"
        return f"{np.float32(v).item()!r}f"
    if name == "bool":
        return "1" if bool(value) else "0"
    v = int(np.asarray(value).astype(np.int64))
    if name == "int64":
        return "(-9223372036854775807LL - 1)" if v == -(2 ** 63) else f"{v}LL"
    if name == "uint32":
        return f"{v}u"
    if v == -(2 ** 31):
        return "(-2147483647 - 1)"
    return str(v)


def _subst(expr: str, subst: dict[str, str]) -> str:
    # replace longest keys first so LEAF12 is not hit by LEAF1
    for key in sorted(subst, key=len, reverse=True):
        expr = expr.replace(key, subst[key])
    return expr


def _fix_ptrs(lines: list[str], restrict: bool = True) -> list[str]:
    """Loop bodies read buffers through local copies of the context's
    pointers (restrict-qualified when no output aliases an input), so the C
    compiler can keep loop invariants in registers and vectorise."""
    import re
    pat = re.compile(r"(?<![\w>.])((?:i|o|t|c)\d+)\[")
    used: list[str] = []
    out = []
    for ln in lines:
        if ln.lstrip().startswith("static") or "k->rowbuf" in ln:
            out.append(ln)
            continue
        ln = ln.replace("k->", "")
        for name in pat.findall(ln):
            if name not in used:
                used.append(name)
        out.append(ln)
    qual = "restrict " if restrict else ""
    decls = [f"  __typeof__(*k->{n}) *{qual}const {n} = k->{n};" for n in used]
    head = next(i for i, ln in enumerate(out) if "const kctx_t *k" in ln)
    return out[:head + 1] + decls + out[head + 1:]


def _lit_dtype(dtype) -> np.dtype:
    return np.dtype(dtype) if dtype_name(dtype) in ("uint32", "int64") else np.dtype("int32")


def _int_min(dtype) -> str:
    info = np.iinfo(np.dtype(dtype)) if dtype_name(dtype) != "bool" else None
    return "0" if info is None else c_literal(info.min, _lit_dtype(dtype))


def _int_max(dtype) -> str:
    info = np.iinfo(np.dtype(dtype)) if dtype_name(dtype) != "bool" else None
    return "1" if info is None else c_literal(info.max, _lit_dtype(dtype))


# ---- elementwise operators --------------------------------------------------
#
# Op-to-C text as tables, built once: each entry is a template over the
# operand expressions {a} (and {b}), in the compute type of the operands.

#: Unary ops on float operands.
UNARY_FLOAT_C = {
    "neg": "(-({a}))", "abs": "__builtin_fabsf({a})", "exp": "nk_exp({a})",
    "expm1": "expm1f({a})", "log": "nk_log({a})", "log1p": "log1pf({a})",
    "log2": "(nk_log({a}) * 1.4426950408889634f)", "sqrt": "__builtin_sqrtf({a})",
    "rsqrt": "(1.0f / __builtin_sqrtf({a}))", "reciprocal": "(1.0f / ({a}))",
    "square": "(({a}) * ({a}))", "sin": "sinf({a})", "cos": "cosf({a})",
    "tan": "tanf({a})", "arctan": "atanf({a})", "tanh": "nk_tanh({a})",
    "sigmoid": "nk_sigmoid({a})", "erf": "nk_erf({a})", "ceil": "__builtin_ceilf({a})",
    "floor": "__builtin_floorf({a})", "rint": "nk_rint({a})",
    "trunc": "__builtin_truncf({a})", "sign": "nk_sign({a})",
    "logical_not": "(({a}) == 0)", "isnan": "(({a}) != ({a}))",
    "isfinite": "(({a}) - ({a}) == 0.0f)", "copy": "({a})",
    "arcsinh": "asinhf({a})", "arccosh": "acoshf({a})", "arctanh": "atanhf({a})",
    "erfc": "erfcf({a})", "lgamma": "nk_lgamma({a})", "sinh": "sinhf({a})",
    "cosh": "coshf({a})", "signbit": "nk_signbit({a})",
}
#: Unary ops on float64 operands (computed in double: libm's functions).
UNARY_DOUBLE_C = {
    "neg": "(-({a}))", "abs": "__builtin_fabs({a})", "exp": "exp({a})", "expm1": "expm1({a})",
    "log": "log({a})", "log1p": "log1p({a})", "log2": "log2({a})", "sqrt": "__builtin_sqrt({a})",
    "rsqrt": "(1.0 / __builtin_sqrt({a}))", "reciprocal": "(1.0 / ({a}))",
    "square": "(({a}) * ({a}))", "sin": "sin({a})", "cos": "cos({a})", "tan": "tan({a})",
    "arctan": "atan({a})", "tanh": "tanh({a})", "sigmoid": "(1.0 / (1.0 + exp(-({a}))))",
    "erf": "erf({a})", "ceil": "__builtin_ceil({a})", "floor": "__builtin_floor({a})",
    "rint": "__builtin_rint({a})", "trunc": "__builtin_trunc({a})",
    "sign": "nk_sign_d({a})", "logical_not": "(({a}) == 0)", "isnan": "(({a}) != ({a}))",
    "isfinite": "(({a}) - ({a}) == 0.0)", "copy": "({a})",
    "arcsinh": "asinh({a})", "arccosh": "acosh({a})", "arctanh": "atanh({a})",
    "erfc": "erfc({a})", "lgamma": "nk_lgamma_d({a})", "sinh": "sinh({a})",
    "cosh": "cosh({a})", "signbit": "nk_signbit_d({a})",
}
#: Binary ops whose float64 or int64 C text differs from BINARY_C's.
BINARY_DOUBLE_C = {"pow": "pow({a}, {b})", "mod": "nk_fmod_py_d({a}, {b})",
                   "floor_div": "nk_floordiv_py_d({a}, {b})", "fmod": "fmod({a}, {b})",
                   "hypot": "hypot({a}, {b})", "copysign": "__builtin_copysign({a}, {b})"}
BINARY_INT64_C = {"pow": "nk_ipow64({a}, {b})", "mod": "nk_imod_py64({a}, {b})",
                  "floor_div": "nk_idiv_floor64({a}, {b})", "div": "nk_idiv_trunc64({a}, {b})"}
#: Unary ops on integer operands.
UNARY_INT_C = {
    "neg": "(-({a}))", "abs": "(({a}) < 0 ? -({a}) : ({a}))", "square": "(({a}) * ({a}))",
    "sign": "((({a}) > 0) - (({a}) < 0))", "logical_not": "(({a}) == 0)",
    "bitwise_not": "(~({a}))",
    "isnan": "0", "isfinite": "1", "copy": "({a})", "ceil": "({a})", "floor": "({a})",
    "rint": "({a})", "trunc": "({a})", "reciprocal": "(1 / ({a}))", "signbit": "(({a}) < 0)",
}
#: Unary ops on bool operands: the integer ones, with a logical bitwise_not.
UNARY_BOOL_C = {**UNARY_INT_C, "bitwise_not": "(!({a}))"}

#: Binary ops: op -> (template on float operands, template on integer or
#: bool operands); None where the op is not defined for that kind.
BINARY_C: dict[str, tuple[str | None, str | None]] = {
    **{op: (f"(({{a}}) {sym} ({{b}}))",) * 2 for op, sym in (
        ("add", "+"), ("sub", "-"), ("mul", "*"), ("eq", "=="), ("ne", "!="), ("lt", "<"),
        ("le", "<="), ("gt", ">"), ("ge", ">="))},
    "div": ("(({a}) / ({b}))", "nk_idiv_trunc({a}, {b})"),
    "maximum": ("NK_FMAX({a}, {b})",
                "(({a}) > ({b}) ? ({a}) : ({b}))"),
    "minimum": ("NK_FMIN({a}, {b})",
                "(({a}) < ({b}) ? ({a}) : ({b}))"),
    "pow": ("powf({a}, {b})", "nk_ipow({a}, {b})"),
    "mod": ("nk_fmod_py({a}, {b})", "nk_imod_py({a}, {b})"),
    "floor_div": ("nk_floordiv_py({a}, {b})", "nk_idiv_floor({a}, {b})"),
    "fmod": ("fmodf({a}, {b})", None), "hypot": ("hypotf({a}, {b})", None),
    "copysign": ("__builtin_copysignf({a}, {b})", None),
    **{op: (f"((({{a}}) != 0) {sym} (({{b}}) != 0))",) * 2 for op, sym in (
        ("logical_and", "&&"), ("logical_or", "||"), ("logical_xor", "!="))},
    **{op: (None, f"(({{a}}) {sym} ({{b}}))") for op, sym in (
        ("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^"))},
    **{f"philox{w}": (None, f"nk_philox({{a}}, {{b}}, {w})") for w in range(4)},
}


def _float8_cast_c(n: Node, a: str) -> tuple[str, np.dtype]:
    """(expression, dtype it has) of a cast's operand made ready for the cast:
    an 8-bit float's NaN as float32 the way the front end converts it (the
    cast's ``float8`` attribute: "torch" for PyTorch's, NumPy's otherwise)."""
    s = n.inputs[0].dtype
    name = dtype_name(s)
    if name not in FLOAT8:
        return a, s
    torch_mode = n.attrs.get("float8") == "torch"
    if not torch_mode:
        a = f"nk_f8_nan_np({a})"
    elif dtype_name(n.output.dtype) == "bfloat16":
        a = f"nk_f8_nan_pos({a})"   # c10's float -> bfloat16: every NaN is 0x7FC0
    elif name == "float8_e5m2":
        a = f"nk_f8_nan_quiet({a})"
    return a, np.dtype("float32")


def cast_c(n: Node, a: str) -> str:
    """C expression of a cast node over its operand expression."""
    dst = n.output.dtype
    a, s = _float8_cast_c(n, a)
    name = dtype_name(dst)
    if name in FLOAT8:
        # through float32 (as ml_dtypes and PyTorch do from float64 and the
        # integers), rounded once to the format, kept in compute form
        pre, eb, mb, fn, np_nan, t_sat, t_nan = FLOAT8[name]
        sat, nan = (t_sat, t_nan) if n.attrs.get("float8") == "torch" else (0, np_nan)
        return f"nk_{pre}_load(nk_f8_round((float)({a}), {eb}, {mb}, {fn}, {sat}, {nan}u))"
    if name == "bool":
        return f"(({a}) != 0)"
    if name == "float32":
        return f"((float)({a}))"
    if name == "float64":
        return f"((double)({a}))"
    if name == "float16":
        return f"((float)(nk_f16)({a}))"
    if name == "bfloat16":
        return f"nk_bf2f(nk_f2bf((float)({a})))"
    if is_float(s):  # float -> int: truncate; NaN and out of range as x86 (eager's CPU)
        conv = "nk_f2i64" if name == "int64" else "nk_f2i32"
        return f"(({compute_type(dst)})({storage_type(dst)}){conv}((double)({a})))"
    return f"(({compute_type(dst)})({storage_type(dst)})({a}))"


#: Views an exponent may sit behind (maps.VIEW_OPS; ctext sits below maps).
_EXPONENT_VIEWS = frozenset({"reshape", "transpose", "slice", "broadcast_to"})


def _small_int_exponent(v) -> int | None:
    """The exponent of a float32 ``pow`` when it is one constant (through views)
    among -4..-1 and 2..4, else None. Such powers become multiplications
    (``nk_powi3(x)`` is ``x * x * x``): libm's powf does not vectorise, and the
    cube in GPT-2's tanh GELU was a tenth of a training step. PyTorch computes
    x ** 2, ** 3, ** -1 and ** -2 as these products too; for the others the
    product is within 2 ulp of the correctly rounded power."""
    while v.node is not None and v.node.op in _EXPONENT_VIEWS:
        v = v.node.inputs[0]
    if v.node is None or v.node.op != "constant":
        return None
    vals = np.unique(np.asarray(v.node.attrs["value"]))
    if vals.size != 1:
        return None
    e = float(vals[0])
    if not math.isfinite(e) or e != int(e):
        return None
    e = int(e)
    return e if (-4 <= e <= -1 or 2 <= e <= 4) else None


#: Integer dtypes stored narrower than the int32_t they are computed in.
_NARROW_INT = frozenset({"int8", "uint8", "int16", "uint16"})


def elementwise_c(n: Node, args: list[str]) -> str:
    """C expression of an elementwise node over operand expressions.

    Results of int8/uint8/int16/uint16 ops are wrapped to their storage type
    right away: C computes them in int32_t, and a fused consumer reading the
    unwrapped value saw e.g. abs(int8 -128) as 128 rather than -128."""
    text = _elementwise_c(n, args)
    dst = n.output.dtype
    if n.op not in ("cast", "where") and dtype_name(dst) in _NARROW_INT:
        text = f"(({compute_type(dst)})({storage_type(dst)})({text}))"
    return text


def _elementwise_c(n: Node, args: list[str]) -> str:
    op = n.op
    out = n.output
    src_dtype = n.inputs[-1].dtype if n.inputs else out.dtype
    flt = is_float(src_dtype)
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if op == "cast":
        return cast_c(n, a)
    if op == "where":
        return f"NK_SELECT({a}, {b}, {args[2]})"
    if op == "fail_if":
        return f"NK_FAIL_IF({a}, {b})"
    if op in UNARY:
        table = (UNARY_DOUBLE_C if is_double(src_dtype) else UNARY_FLOAT_C) if flt else (
            UNARY_BOOL_C if dtype_name(src_dtype) == "bool" else UNARY_INT_C)
        if op not in table:
            raise CodegenError(f"{op} is not defined for {dtype_name(src_dtype)}")
        return table[op].format(a=a)
    if op == "pow" and flt and not is_double(src_dtype):
        e = _small_int_exponent(n.inputs[1])
        if e is not None:
            return f"nk_powi{'m' if e < 0 else ''}{abs(e)}({a})"
    wide = {"float64": BINARY_DOUBLE_C, "int64": BINARY_INT64_C}.get(dtype_name(src_dtype))
    template = None
    if wide is not None and op in wide:
        template = wide[op]
    elif op in BINARY and op in BINARY_C:
        template = BINARY_C[op][0 if flt else 1]
    if template is not None:
        text = template.format(a=a, b=b)
        if n.attrs.get("zero_div") == "raise" and not flt:
            # a zero divisor fails the execution (PyTorch raises ZeroDivisionError)
            text = f"(({compute_type(out.dtype)})NK_ZCHK({b}, {text}))"
        return text
    raise CodegenError(f"no C lowering for elementwise op {op!r} on {dtype_name(src_dtype)}")


#: Sum, product, any and all: op -> (initial value, update of acc by x,
#: omp simd reduction clause).
REDUCE_C = {
    "reduce_sum": ("0", "acc += x;", "reduction(+:acc)"),
    "reduce_prod": ("1", "acc *= x;", "reduction(*:acc)"),
    "reduce_any": ("0", "acc |= (x != 0);", "reduction(|:acc)"),
    "reduce_all": ("1", "acc &= (x != 0);", "reduction(&:acc)"),
}


def reduce_parts(op: str, src_dtype: np.dtype, out_dtype: np.dtype):
    """(accumulator C type, declarations, update statement, omp simd clause,
    finishing statement) of a reduction over values `x` into `acc`."""
    flt = is_float(src_dtype)
    if op in ("reduce_max", "reduce_min"):
        acct = compute_type(src_dtype)
        cmp, kind = (">", "max") if op == "reduce_max" else ("<", "min")
        if flt:
            sfx = "" if is_double(src_dtype) else "f"
            init = f"-__builtin_inf{sfx}()" if op == "reduce_max" else f"__builtin_inf{sfx}()"
            return (acct, f"{acct} acc = {init}; int nanf = 0;",
                    f"acc = x {cmp} acc ? x : acc; nanf |= (x != x);",
                    f"reduction({kind}:acc) reduction(|:nanf)",
                    f"acc = nanf ? __builtin_nan{sfx}(\"\") : acc;")
        init = _int_min(src_dtype) if op == "reduce_max" else _int_max(src_dtype)
        return (acct, f"{acct} acc = {init};", f"acc = x {cmp} acc ? x : acc;",
                f"reduction({kind}:acc)", "")
    acct = compute_type(out_dtype)
    init, update, clause = REDUCE_C[op]
    if op in ("reduce_any", "reduce_all"):
        acct = "int32_t"
    return acct, f"{acct} acc = {init};", update, clause, ""


def c_string(text: str) -> str:
    """A C string literal of ``text`` (printable ASCII kept, the rest escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~" and ch != "?":
            out.append(ch)
        else:
            out.append("\\%03o" % (ord(ch) & 0xFF) if ord(ch) < 256 else "?")
    return '"' + "".join(out) + '"'
