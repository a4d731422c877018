"""What the generated MindSpore wrappers (``_ops.py``) share; nothing here knows an op.

Each op is an ``ops.Custom(func_type="aot")`` primitive over the AOT entry points, whose last input
is a zero-element tensor carrying the scalar arguments (``_encoding``). Before a primitive runs,
``prepare`` checks the arguments with the kernel library's own rules (``opforge_<op>_infer``
through ctypes), so a wrong argument raises TypeError or ValueError naming the function, in GRAPH
mode while the graph compiles.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

from opforge.mindspore import _encoding
from opforge.mindspore._abi import KernelError, KernelLibrary
from opforge.mindspore._abi import Tensor as Meta
from opforge.mindspore._library import device_kind, entry
from opforge.mindspore._signatures import LAYOUTS, SIGNATURES

_HERE = Path(__file__).resolve().parent

_DTYPE_NAMES = {
    mstype.float32: "float32",
    mstype.float16: "float16",
    mstype.bfloat16: "bfloat16",
    mstype.float64: "float64",
    mstype.int64: "int64",
    mstype.int32: "int32",
    mstype.int8: "int8",
}

# Output dtypes as MindSpore infers them: tensor types, not the bare number types (GRAPH mode
# turns a 0-d output typed `int64` into a Python int).
INT64 = mstype.TensorType(mstype.int64)
FLOAT32 = mstype.TensorType(mstype.float32)

_SPECS: dict[str, tuple] = {}

# Per opforge.mindspore function, the parameter each kernel argument is passed as where the two
# names differ (``{"softmax": {"x": "input", "dim": "axis"}}``).
_PARAMETERS: dict[str, dict[str, str]] = {}


@functools.cache
def kernels() -> KernelLibrary:
    """The kernel library bundled in this package, for argument checks and shape inference."""
    return KernelLibrary(_HERE / "libopforge_kernels.so.0", SIGNATURES)


def register(op: str, shape, dtype, bprop) -> None:
    """Record ``op``'s shape and dtype inference and bprop for its primitive."""
    _SPECS[op] = (shape, dtype, bprop)


def name_arguments(names: dict[str, dict[str, str]]) -> None:
    """Record, per function, the parameter each kernel argument is passed as: errors name the
    parameter the caller wrote, not the kernel's argument."""
    _PARAMETERS.update(names)


def _parameter(fn: str, name: str) -> str:
    """The parameter of ``fn`` the kernel argument ``name`` is passed as."""
    return _PARAMETERS.get(fn, {}).get(name, name)


@functools.cache
def _argument_words(fn: str) -> re.Pattern | None:
    names = _PARAMETERS.get(fn)
    if not names:
        return None
    # add's and mul's argument `a` is also English's article ("x has a negative dimension"): as
    # an argument it is followed by what is said of it.
    words = [r"a(?= (?:is|has|must)\b)" if name == "a" else re.escape(name) for name in names]
    return re.compile(r"\b(" + "|".join(words) + r")\b")


def _in_parameters(fn: str, message: str) -> str:
    """A kernel check's message with the arguments it names as ``fn``'s parameters. The kernel
    library words each argument as a whole word, in one pass here so that a name is never
    replaced twice (x -> input, input -> ...)."""
    words = _argument_words(fn)
    if words is None:
        return message
    return words.sub(lambda found: _PARAMETERS[fn][found.group(1)], message)


@functools.cache
def _make_primitive(op: str, kind: str) -> ops.Custom:
    shape, dtype, bprop = _SPECS[op]
    return ops.Custom(
        entry(op, kind), out_shape=shape, out_dtype=dtype, func_type="aot", bprop=bprop
    )


@ops.constexpr
def primitive(op):
    """``op``'s Custom primitive for the current device."""
    return _make_primitive(op, device_kind())


@ops.constexpr
def absent():
    """The placeholder passed for an absent optional tensor."""
    return Tensor(np.zeros((0,), np.float32))


@functools.lru_cache(maxsize=256)
def _attribute_tensor(dims: tuple[int, ...]) -> Tensor:
    # Not numpy: it refuses shapes whose other dims multiply past int64, even with a leading 0.
    return ops.zeros((0, *dims), mstype.int8)


_MEMO_SIZE = 1024


def _memo_key(value: object) -> object:
    # The type and, for floats, the sign: 0.0 == -0.0 and True == 1 as plain keys.
    if isinstance(value, (float, np.floating)):
        return (type(value), float(value), math.copysign(1.0, float(value)))
    if isinstance(value, tuple):
        return (tuple, tuple(_memo_key(v) for v in value))
    return (type(value), value)


def memo(function: Callable) -> Callable:
    """``function`` with its results kept per argument values (the checks of a training loop's
    repeated calls run once). Keys tell apart what compares equal but means something else
    (``True`` and ``1``, ``0.0`` and ``-0.0``); an unhashable argument (a list where a scalar
    goes) is not cached, so that the checks refuse it in their own words; a call that raises
    is never cached."""
    cache: dict = {}

    @functools.wraps(function)
    def call(*args):
        try:
            key = tuple(_memo_key(a) for a in args)
            hash(key)
        except TypeError:
            return function(*args)
        if key not in cache:
            if len(cache) >= _MEMO_SIZE:
                cache.pop(next(iter(cache)))
            cache[key] = function(*args)
        return cache[key]

    return call


class InvalidArgumentError(ValueError, RuntimeError):
    """Arguments the kernels refuse, a shape that does not fit another, say. A ValueError, and a
    RuntimeError as well: MindSpore's own ops raise that for the mismatches their C++ shape
    inference finds (layer_norm's weight, rms_norm's gamma), ValueError for others."""


def _fail(fn: str, message: str, kind: type[Exception] = ValueError) -> Exception:
    return kind(f"opforge.mindspore.{fn}: {message}")


@ops.constexpr
def refuse(fn: str, message: str) -> bool:
    """Raise TypeError naming ``fn``. Checks in code that GRAPH mode compiles refuse through
    here: MindSpore turns a ``raise`` in graph code into one that gives the repr of the message
    (quoted, so no longer starting with ``opforge``), and a constexpr's as it is."""
    raise _fail(fn, message, TypeError)


@ops.constexpr
def uninitialized(fn: str, name: str) -> bool:
    """Raise RuntimeError, as MindSpore's own ops do, for a Tensor created with ``init=`` whose
    values were never made (``Tensor.init_data``)."""
    raise _fail(
        fn,
        f"{name} is uninitialized (a Tensor created with init=): call {name}.init_data() first",
        RuntimeError,
    )


@ops.constexpr
def no_derivative(fn: str, functions: str, backward: str) -> bool:
    """Refuse to differentiate ``backward``, an op the table gives no derivative of: MindSpore's
    forward mode (``ops.jvp``, a gradient of the gradient taken twice) and gradients of
    gradients both come here, and MindSpore does not tell them apart."""
    raise _fail(
        fn,
        "forward mode (ops.jvp) and gradients of gradients are not supported through "
        f"opforge.mindspore.{functions} ({backward} has no derivative)",
        RuntimeError,
    )


@ops.constexpr
def constant_scalars(fn: str, names: tuple, known: tuple, also: str = "") -> bool:
    """Refuse a scalar argument whose value the graph only has at run time (GRAPH mode:
    ``mindspore.mutable``, or a value computed from tensors): opforge's kernels take scalars
    when the graph is compiled. ``also`` extends the hint (an operand may be a Tensor)."""
    for name, constant in zip(names, known, strict=True):
        if not constant:
            raise _fail(
                fn,
                f"{_parameter(fn, name)} must be a constant when the graph is compiled, got a "
                "value known only at run time (mindspore.mutable or computed from tensors): pass "
                f"a Python value{also}",
                TypeError,
            )
    return True


@functools.cache
def _bounds(interval: str) -> tuple[float, float]:
    low, high = interval[1:-1].split(",")
    return float(low), float(high)


@ops.constexpr
def in_range(fn: str, name: str, value: object, interval: str) -> bool:
    """Refuse a number outside ``interval`` ("(0, 1]"), the range MindSpore's own op takes
    (NaN is in no interval); anything else is left to the argument checks, which name it."""
    if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
        return True
    low, high = _bounds(interval)
    above = value > low if interval[0] == "(" else value >= low
    below = value < high if interval[-1] == ")" else value <= high
    if not (above and below):
        raise _fail(fn, f"{name} must be in {interval}, as in mindspore.ops.{fn}, got {value}")
    return True


@ops.constexpr
def same_dtype(fn: str, names: tuple, dtypes: tuple) -> bool:
    """Refuse tensors of different dtypes where MindSpore's own op refuses them (``ops.rms_norm``:
    x and gamma); an absent or non-tensor argument (None) is left to the other checks."""
    given = [(name, dtype) for name, dtype in zip(names, dtypes, strict=True) if dtype is not None]
    for name, dtype in given[1:]:
        if dtype != given[0][1]:
            first, first_dtype = given[0]
            raise _fail(
                fn,
                f"{name} must have the dtype of {first}, as in mindspore.ops.{fn}: {first} is "
                f"{_dtype_name(first_dtype)}, {name} is {_dtype_name(dtype)}",
                TypeError,
            )
    return True


def _dtype_name(dtype) -> str:
    """A MindSpore dtype as ``mindspore.<name>`` spells it (``uint16``, ``bfloat16``)."""
    return str(dtype).lower()


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _fits_64_bits(value) -> bool:
    return -(2**63) <= int(value) < 2**63


def _check_scalar(fn: str, name: str, kind: str, value: object) -> None:
    base = kind.rstrip("?")
    if kind.endswith("?") and value is None:
        return
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, bool
    )
    if base == "int" and not _is_int(value):
        raise _fail(fn, f"{name} must be an int, got {value!r}", TypeError)
    if base == "float" and not numeric:
        raise _fail(fn, f"{name} must be a number, got {value!r}", TypeError)
    if base == "float" and isinstance(value, int) and abs(value) > np.finfo(np.float64).max:
        raise _fail(
            fn,
            f"{name} is too large for a double, got an int of {len(str(abs(value)))} digits",
            OverflowError,
        )
    if base == "int" and not _fits_64_bits(value):
        raise _fail(fn, f"{name} is out of range for a 64-bit int, got {value}", OverflowError)
    if base == "bool" and not isinstance(value, (bool, np.bool_)):
        raise _fail(fn, f"{name} must be a bool, got {value!r}", TypeError)
    if base == "int[]" and isinstance(value, (tuple, list)) and None in value:
        # GRAPH mode: ops.isconstant calls a tuple constant even when an element is a mutable.
        raise _fail(
            fn,
            f"{name} must be constants when the graph is compiled, got {value!r} (None: a value "
            "known only at run time, such as mindspore.mutable): pass Python ints",
            TypeError,
        )
    if base == "int[]" and not (
        isinstance(value, (tuple, list)) and all(_is_int(v) for v in value)
    ):
        raise _fail(fn, f"{name} must be a sequence of ints, got {value!r}", TypeError)
    if base == "int[]" and not all(_fits_64_bits(v) for v in value):
        raise _fail(
            fn,
            f"{name} is out of range for 64-bit ints, got {list(value)}: give values from -2**63 "
            "to 2**63-1",
            OverflowError,
        )
    if base.startswith("str:") and value not in base[4:].split("|"):
        allowed = ", ".join(repr(v) for v in base[4:].split("|"))
        raise _fail(fn, f"{name} must be one of {allowed}, got {value!r}", ValueError)


def _static_shape(fn: str, name: str, shape) -> None:
    """Refuse a shape GRAPH mode only knows at run time (an unknown rank: None; unknown dims:
    None or negative)."""
    if shape is None:
        raise _fail(fn, f"{name} has an unknown rank; opforge needs static shapes", ValueError)
    if any(d is None or d < 0 for d in shape):
        raise _fail(
            fn,
            f"{name} has a dynamic shape {list(shape)}: opforge's MindSpore ops need static "
            "shapes (give the Cell's inputs fixed shapes)",
        )


def _meta(fn: str, name: str, shape, dtype, allowed: str) -> Meta:
    _static_shape(fn, name, shape)
    dtype_name = _DTYPE_NAMES.get(dtype)
    if dtype_name is None:
        raise _fail(fn, f"{name} has dtype {_dtype_name(dtype)} (supported: {allowed})", TypeError)
    return Meta.meta(tuple(shape), dtype_name)


def prepare(op: str, fn: str, metas: tuple, scalars: tuple) -> Tensor:
    """Check ``op``'s arguments and return the attribute tensor carrying its scalars.

    ``metas`` are ``(shape, dtype)`` per tensor argument (``None`` for an absent optional one),
    ``scalars`` the non-tensor arguments in order.
    """
    layout = LAYOUTS[op]
    arguments: dict[str, object] = {}
    ranks = {}
    for (name, optional, _mutable, allowed), meta in zip(layout["tensors"], metas, strict=True):
        if meta is None:
            if not optional:
                raise _fail(fn, f"{_parameter(fn, name)} is required", TypeError)
            arguments[name] = None
            continue
        arguments[name] = _meta(fn, _parameter(fn, name), meta[0], meta[1], allowed)
        ranks[name] = len(meta[0])
    for (name, kind, _dim_of), value in zip(layout["scalars"], scalars, strict=True):
        _check_scalar(fn, _parameter(fn, name), kind, value)
        arguments[name] = tuple(value) if kind == "int[]" else value
    try:
        kernels().infer(op, **arguments)
    except KernelError as exc:
        message = _in_parameters(fn, exc.message.removeprefix(f"opforge_{op}: "))
        raise _fail(
            fn, message, TypeError if exc.status_name == "INVALID_DTYPE" else InvalidArgumentError
        ) from None
    items = [
        ("flag", arguments[name] is not None)
        for name, optional, *_ in layout["tensors"]
        if optional
    ]
    for name, kind, dim_of in layout["scalars"]:
        value = arguments[name]
        if dim_of is not None and value is not None:
            value = value % max(ranks[dim_of], 1)
        ints = value if kind.startswith("int[]") else (value,) if kind.startswith("int") else ()
        if any(v is not None and abs(v) >= 2**31 for v in ints):
            # The shape of a tensor carries the scalars (_encoding), and GRAPH mode takes no
            # dim of 2**31 or more.
            raise _fail(
                fn,
                f"{_parameter(fn, name)} {list(value) if kind.startswith('int[]') else value} "
                "is past what opforge's MindSpore ops can carry: each value must be below 2**31 "
                "in magnitude",
                ValueError,
            )
        items.append((kind, value))
    return _attribute_tensor(_encoding.encode(items))


def values(op: str, attrs_shape) -> dict:
    """The presence flags and scalars an attribute shape (``attrs.shape``) carries."""
    layout = LAYOUTS[op]
    optional = [name for name, opt, *_ in layout["tensors"] if opt]
    kinds = ["flag"] * len(optional) + [kind for _, kind, _ in layout["scalars"]]
    decoded = _encoding.decode(kinds, tuple(attrs_shape)[1:])
    result = {f"has_{name}": v for name, v in zip(optional, decoded, strict=False)}
    result.update(
        zip((name for name, _, _ in layout["scalars"]), decoded[len(optional) :], strict=True)
    )
    return result


def attrs_for(op: str, given: dict) -> Tensor:
    """The attribute tensor of ``op`` for already checked values (``has_<tensor>`` and scalars)."""
    layout = LAYOUTS[op]
    items = [("flag", given[f"has_{name}"]) for name, optional, *_ in layout["tensors"] if optional]
    items += [(kind, given[name]) for name, kind, _ in layout["scalars"]]
    return _attribute_tensor(_encoding.encode(items))


def cast_first(fn: str, tensor, dtype):
    """A tensor cast to a ``dtype=`` argument first (None: as it is), refused naming ``dtype``
    where opforge has no kernel for it (the op's check would name the input)."""
    if dtype is None:
        return tensor
    _computable_dtype(fn, dtype)
    return tensor.astype(dtype)


@ops.constexpr
def _computable_dtype(fn: str, dtype) -> bool:
    if dtype not in (mstype.float32, mstype.float16, mstype.bfloat16):
        raise _fail(
            fn,
            f"dtype={_dtype_name(dtype)} is not supported: pass mindspore.float32, float16 or "
            "bfloat16",
            TypeError,
        )
    return True


def sens_like(dout: Tensor, out: Tensor) -> Tensor:
    """An op's output gradient in its output's shape. GRAPH mode hands a bprop the sens as
    given (``ops.GradOperation(sens_param=True)``); MindSpore's own bprops broadcast a smaller
    one, and a backward kernel would refuse it, or a sum to an input's shape miss it."""
    if dout.shape == out.shape:
        return dout
    return ops.broadcast_to(dout, out.shape)


@ops.constexpr
def sum_axes(grad_shape, shape):
    """The axes over which a gradient of ``grad_shape`` sums to an input of ``shape``."""
    extra = len(grad_shape) - len(shape)
    axes = list(range(extra))
    axes += [extra + i for i, d in enumerate(shape) if d == 1 and grad_shape[extra + i] != 1]
    return tuple(axes)


def sum_to(grad: Tensor, shape) -> Tensor:
    """``grad`` summed over the dims broadcasting added to an input of ``shape``, in float32
    (MindSpore's CPU ReduceSum has no bfloat16 kernel, and 2-byte sums lose digits), then in
    ``grad``'s dtype. The reshape comes before that cast: in GRAPH mode MindSpore's CPU Reshape
    has no bfloat16 kernel either."""
    axes = sum_axes(grad.shape, shape)
    if not axes:
        return grad
    total = ops.ReduceSum(keep_dims=True)(grad.astype(mstype.float32), axes)
    return ops.reshape(total, shape).astype(grad.dtype)


def like(grad: Tensor, reference: Tensor) -> Tensor:
    """A gradient in the dtype of the input it is for."""
    if grad.dtype == reference.dtype:
        return grad
    return grad.astype(reference.dtype)


_FLOAT_RANK = {mstype.bfloat16: 1, mstype.float16: 1, mstype.float32: 2, mstype.float64: 3}


_INT_DTYPES = (mstype.int8, mstype.int16, mstype.int32, mstype.int64, mstype.uint8, mstype.bool_)


@ops.constexpr
def _result_dtype(fn, a, b, zero_dim_as_number):
    # a and b are (dtype, is 0-d) of tensor operands, or the Python numbers themselves (constants
    # in GRAPH mode). With zero_dim_as_number (ops.mul's rule, measured): 0-d tensors and Python
    # floats, the latter as float32, decide the dtype only where no operand with dims is a float.
    def kind(v, name):
        if isinstance(v, bool):
            return "bool", None
        if isinstance(v, int):
            return "int", None
        if isinstance(v, float):
            return "float", (mstype.float32 if zero_dim_as_number else None)
        dtype, zero_dim = v
        number = zero_dim and zero_dim_as_number
        if dtype in _FLOAT_RANK:
            return ("float" if number else "tensor-float"), dtype
        if dtype in _INT_DTYPES:
            return ("int" if number else "tensor-int"), dtype
        # A tensor of a dtype the promotion has no place for: MindSpore's own op refuses it too,
        # with TypeError ("Type implicit conversion between UInt16 and Float32 is not supported").
        raise _fail(
            fn,
            f"{name} has dtype {_dtype_name(dtype)}, which opforge does not take (tensors of "
            "float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8 or bool)",
            TypeError,
        )

    (ka, da), (kb, db) = kind(a, "input"), kind(b, "other")
    floats = [d for k, d in ((ka, da), (kb, db)) if k == "tensor-float"]
    numbers = [d for k, d in ((ka, da), (kb, db)) if k == "float" and d is not None]
    if len(floats) == 2:
        dtype = _wider(floats[0], floats[1])
    elif floats:
        dtype = floats[0]
    elif numbers:
        # Float 0-d tensors with no float operand with dims: the widest of them.
        dtype = numbers[0] if len(numbers) == 1 else _wider(numbers[0], numbers[1])
    elif "float" in (ka, kb) and any(d in _INT_DTYPES for d in (da, db) if d is not None):
        dtype = mstype.float32
    else:
        raise TypeError(
            f"opforge.mindspore.{fn}: the result would not be a floating tensor; opforge computes "
            "float32, float16 and bfloat16"
        )
    if dtype == mstype.float64:
        raise TypeError(
            f"opforge.mindspore.{fn}: the result dtype would be float64; opforge computes float32, "
            "float16 and bfloat16"
        )
    return dtype


def _wider(a, b):
    if a != b and _FLOAT_RANK[a] == _FLOAT_RANK[b]:
        return mstype.float32  # float16 with bfloat16
    return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b


def _dtype_or_value(fn, v):
    if isinstance(v, Tensor):
        return v.dtype, v.ndim == 0
    if isinstance(v, (bool, int, float)):
        return v
    # Joined by +: GRAPH mode's parser fails on an f-string implicitly joined to another.
    return refuse(
        fn,
        f"operands are mindspore.Tensor or Python numbers, got {type(v).__name__} "
        + "(wrap arrays with mindspore.Tensor(...))",
    )


def _number(v):
    # A NumPy scalar promotes as the Python number it holds, as in MindSpore's ops.
    return v.item() if isinstance(v, (np.bool_, np.integer, np.floating)) else v


def _as(v, dtype):
    if isinstance(v, Tensor):
        if v.dtype == dtype:
            return v
        return v.astype(dtype)
    if dtype == mstype.bfloat16:
        # GRAPH mode's ScalarToTensor has no bfloat16: through float32, exact for every number
        # bfloat16 holds.
        return ops.scalar_to_tensor(v, mstype.float32).astype(dtype)
    return ops.scalar_to_tensor(v, dtype)


# The dtypes whose ops.mul reads a float number, or a 0-d float32 or float64 tensor, in float32.
_HALF = (mstype.float16, mstype.bfloat16)


@ops.constexpr
def _computed_in(a, b, dtype, zero_dim_as_number):
    """(the dtype a promoted op computes in, the dtype its result is cast to after: None when
    the same). ``ops.mul`` (``zero_dim_as_number``) reads a 0-d float32 or float64 tensor in
    float32 beside a float16 or bfloat16 tensor and rounds the product once: there the op
    computes in float32, as GRAPH mode does not know the tensor's value to fold it into mul's
    scale (``_folds`` does that for a float number). ``a`` and ``b`` as ``_result_dtype``'s."""
    if not zero_dim_as_number or dtype not in _HALF:
        return dtype, None
    for v in (a, b):
        if isinstance(v, tuple) and v[1] and _FLOAT_RANK.get(v[0], 0) > 1:
            return mstype.float32, dtype
    return dtype, None


@ops.constexpr
def _no_tensor(fn: str, a, b) -> bool:
    # The numbers formatted here: GRAPH mode's f-strings print 2.0 as 2.
    raise _fail(fn, f"give at least one tensor, got {a} and {b}", TypeError)


def promote(fn: str, a, b, zero_dim_as_number: bool = False) -> tuple:
    """Two operands as tensors under MindSpore's type promotion (that of ``ops.mul`` with
    ``zero_dim_as_number``: a 0-d tensor counts as a number), and the dtype the op's result is
    cast to afterwards (None: the operands' own, the result dtype; else they are float32 and it
    is float16 or bfloat16: ``_computed_in``)."""
    a, b = _number(a), _number(b)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        _no_tensor(fn, a, b)
    if isinstance(a, Tensor) and getattr(a, "has_init", False):
        uninitialized(fn, "input")
    if isinstance(b, Tensor) and getattr(b, "has_init", False):
        uninitialized(fn, "other")
    # GRAPH mode: a number known only at run time (mindspore.mutable) has no value to promote by.
    constant_scalars(
        fn,
        ("input", "other"),
        (isinstance(a, Tensor) or ops.isconstant(a), isinstance(b, Tensor) or ops.isconstant(b)),
        " or a Tensor",
    )
    va, vb = _dtype_or_value(fn, a), _dtype_or_value(fn, b)
    dtype = _result_dtype(fn, va, vb, zero_dim_as_number)
    if _folds(va, vb, dtype, zero_dim_as_number):
        # Tensor first: the number becomes mul's scale (folded_factor), the product commutes.
        tensor, number = (a, b) if isinstance(a, Tensor) else (b, a)
        return _as(tensor, dtype), float(number), None
    compute, cast = _computed_in(va, vb, dtype, zero_dim_as_number)
    return _as(a, compute), _as(b, compute), cast


@ops.constexpr
def _folds(a, b, dtype, zero_dim_as_number) -> bool:
    """Whether ``ops.mul`` (``zero_dim_as_number``) of a float16 or bfloat16 tensor and a float
    number: MindSpore reads the number in float32 and rounds the product once (x * 0.1 in
    float16), which mul's scale does without float32 copies of the tensor. An int number it
    rounds to the dtype first (x * 70000 is inf in float16), as the operands' conversion does.
    ``a`` and ``b`` as ``_result_dtype``'s."""
    if not zero_dim_as_number or dtype not in _HALF:
        return False
    kinds = [type(v) for v in (a, b)]
    return float in kinds and tuple in kinds


def unit_if_folded(other, like: Tensor):
    """mul's second operand: ``other``, or a 0-d one of ``like``'s dtype where ``promote`` left
    ``other`` a number to fold into mul's scale (``folded_factor``)."""
    if isinstance(other, float):
        return _as(1.0, like.dtype)
    return other


def folded_factor(other) -> float:
    """mul's scale: the number ``promote`` left ``other`` to be read in float32, else 1."""
    return other if isinstance(other, float) else 1.0


def cast_result(out: Tensor, dtype: mstype.Type | None) -> Tensor:
    """A promoted op's result in the dtype ``promote`` said it must have (None: as it is)."""
    return out if dtype is None else out.astype(dtype)


@ops.constexpr
def int_tuple(value) -> tuple:
    """An int-list argument given as one int or a sequence of ints (MindSpore accepts both);
    anything else is left to the argument checks, which name it."""
    if _is_int(value):
        return (int(value),)
    if isinstance(value, (tuple, list)):
        return tuple(int(v) if _is_int(v) else v for v in value)
    return value


# The dtypes opforge's kernels take (the op table's `floating` set).
_FLOATING = {mstype.float32: "float32", mstype.float16: "float16", mstype.bfloat16: "bfloat16"}


@ops.constexpr
def _layer_norm_axes(fn: str, shape, begin_norm_axis, begin_params_axis) -> tuple:
    """``ops.LayerNorm``'s two axes as dims of an input of ``shape``, checked."""
    _static_shape(fn, "input_x", shape)
    rank = len(shape)
    if rank == 0:
        # ops.LayerNorm refuses it too ("the x_rank must be not equal to 0").
        raise _fail(
            fn,
            "input_x must have at least one dim, as in ops.LayerNorm, got a 0-d tensor: "
            "reshape it to (1,)",
        )
    axes = []
    for name, axis in (
        ("begin_norm_axis", begin_norm_axis),
        ("begin_params_axis", begin_params_axis),
    ):
        if axis is None:
            # In GRAPH mode a mindspore.mutable axis reaches this check as None too.
            raise _fail(
                fn,
                f"{name} must be an int known when the graph is compiled (a Python int, not "
                "mindspore.mutable), got None",
                TypeError,
            )
        if not _is_int(axis):
            raise _fail(fn, f"{name} must be an int, got {type(axis).__name__} {axis!r}", TypeError)
        # ops.LayerNorm takes -1 and no other negative axis.
        if not -1 <= axis < rank:
            raise _fail(
                fn, f"{name} must be an int in [-1, {rank}), as in ops.LayerNorm, got {axis}"
            )
        axes.append(int(axis) % rank)
    return tuple(axes)


@ops.constexpr
def _params_apart(fn: str, shape, begin_norm_axis, begin_params_axis) -> bool:
    """Whether gamma and beta span other dims than the normalised ones: then they are applied
    after the kernel, by MindSpore's broadcasting ops, rather than by the kernel."""
    norm_axis, params_axis = _layer_norm_axes(fn, shape, begin_norm_axis, begin_params_axis)
    return norm_axis != params_axis


@ops.constexpr
def _normalized_dims(fn: str, shape, dtype, params, begin_norm_axis, begin_params_axis) -> tuple:
    norm_axis, params_axis = _layer_norm_axes(fn, shape, begin_norm_axis, begin_params_axis)
    # Checked here, not left to the kernel: where gamma and beta span other dims it never sees
    # them, nor input_x's own dtype (it gets a float32 copy).
    if dtype not in _FLOATING:
        raise _fail(
            fn,
            f"input_x has dtype {_dtype_name(dtype)} (supported: {', '.join(_FLOATING.values())})",
            TypeError,
        )
    expected = list(shape[params_axis:])
    for name, meta in params:
        if meta is None:
            continue
        _static_shape(fn, name, meta[0])
        if list(meta[0]) != expected:
            raise _fail(
                fn,
                f"{name} must have shape {expected} (input_x's dims from begin_params_axis "
                f"{begin_params_axis}, as in ops.LayerNorm), got {list(meta[0])}",
            )
        if meta[1] not in (mstype.float32, dtype):
            also = "" if dtype == mstype.float32 else f" or {_dtype_name(dtype)} (input_x's dtype)"
            raise _fail(fn, f"{name} must be float32{also}, got {_dtype_name(meta[1])}", TypeError)
    return tuple(shape[norm_axis:])


def _shape_and_dtype(t):
    return None if t is None else (t.shape, t.dtype)


def normalized_dims(
    fn: str, x: Tensor, gamma, beta, begin_norm_axis: int, begin_params_axis: int
) -> tuple:
    """``x``'s dims from ``begin_norm_axis`` on (``ops.LayerNorm``'s normalised dims), with the
    axes, ``x``'s dtype and ``gamma`` and ``beta`` (absent: None; else of ``x``'s dims from
    ``begin_params_axis`` on, float32 or ``x``'s dtype) checked."""
    params = (("gamma", _shape_and_dtype(gamma)), ("beta", _shape_and_dtype(beta)))
    return _normalized_dims(fn, x.shape, x.dtype, params, begin_norm_axis, begin_params_axis)


def norm_input(fn: str, x: Tensor, begin_norm_axis: int, begin_params_axis: int) -> Tensor:
    """``x`` as the kernel normalises it: as it is where gamma and beta go to the kernel, else
    a float32 copy, so that ``apply_params`` scales and shifts the kernel's unrounded result
    and ``y`` rounds to ``x``'s dtype once."""
    if _params_apart(fn, x.shape, begin_norm_axis, begin_params_axis):
        return x.astype(mstype.float32)
    return x


def fused_param(fn: str, param, x: Tensor, begin_norm_axis: int, begin_params_axis: int):
    """``param`` (gamma or beta) for the kernel where it spans the normalised dims, else None:
    ``apply_params`` applies it."""
    if _params_apart(fn, x.shape, begin_norm_axis, begin_params_axis):
        return None
    return param


def apply_params(
    fn: str, y: Tensor, x: Tensor, gamma, beta, begin_norm_axis: int, begin_params_axis: int
) -> Tensor:
    """The kernel's ``y`` scaled by ``gamma`` and shifted by ``beta``, broadcast over ``x``'s
    trailing dims, where they span other dims than the normalised ones (``ops.LayerNorm`` with
    a ``begin_params_axis`` of its own), in float32 and then in ``x``'s dtype; elsewhere the
    kernel applied them and ``y`` is returned as it is. MindSpore's autodiff composes these
    ops' gradients with the kernel's bprop."""
    if not _params_apart(fn, x.shape, begin_norm_axis, begin_params_axis):
        return y
    if gamma is not None:
        y = y * gamma.astype(mstype.float32)
    if beta is not None:
        y = y + beta.astype(mstype.float32)
    return y if x.dtype == mstype.float32 else y.astype(x.dtype)


def variance(x: Tensor, mean: Tensor) -> Tensor:
    """The biased variance of ``x`` over the dims after ``mean``'s (the normalised ones), from
    the kernel's float32 ``mean``, with those dims kept as 1. Recovering it from
    ``rstd = 1 / sqrt(variance + eps)`` would lose it wherever eps is not small against it. A
    statistic only: no gradient flows through it, as none flows through ``ops.LayerNorm``'s."""
    axes = tuple(range(mean.ndim, x.ndim))
    centred = x.astype(mstype.float32) - keep_dims(mean, x)
    # Rows whose squares, or their float32 sum over up to 2**47 values, would overflow (or
    # underflow) are squared scaled by a power of two (exact), and the variance scaled back in
    # two steps: [2e19, -2e19, 0, 0]'s is 2e38, and 4096 values of +-1e18 have 1e36, which
    # unscaled float32 squares or their sum would have made inf.
    peak = ops.amax(ops.abs(centred), axis=axes, keepdims=True)
    one = ops.ones_like(peak)
    scale = ops.where(
        peak > 2.0**40, one * 2.0**-64, ops.where(peak < 2.0**-60, one * 2.0**64, one)
    )
    scaled = centred * scale
    # The corrected two-pass formula: the float32 mean is up to half an ulp of x off, which the
    # mean of the centred values measures and removes (else a row near 1e4 with a spread of
    # 1e-3 came out 30% high).
    offset = ops.mean(scaled, axis=axes, keep_dims=True)
    spread = (ops.mean(ops.square(scaled), axis=axes, keep_dims=True) - ops.square(offset)) / scale
    spread = spread / scale
    # Rounding can leave a constant row's spread just under 0. A NaN or inf in the row makes it
    # NaN, which must stay NaN: MindSpore's CPU maximum(NaN, 0) is 0.
    return ops.stop_gradient(ops.where(spread < 0.0, ops.zeros_like(spread), spread))


def param_shape(fn: str, gamma) -> tuple:
    """The shape of ``gamma``, which gives the normalised dims; refused naming ``fn`` when
    ``gamma`` is not a tensor."""
    if isinstance(gamma, Tensor):
        return gamma.shape
    return refuse(
        fn,
        "gamma must be a mindspore.Tensor (its shape gives the normalised dims), got "
        + type(gamma).__name__,
    )


def keep_dims(stat: Tensor, x: Tensor) -> Tensor:
    """A per-row statistic with the reduced dims of ``x`` kept as 1 (MindSpore's layout)."""
    return stat.reshape(stat.shape + (1,) * (x.ndim - stat.ndim))
