"""Hostile input to the Python binding (opforge.kernels.abi) itself: what ctypes would pass on
wrongly (an override dtype over bits of another size, byte strides that are not whole elements,
ints wrapped modulo 2**64) or fail on opaquely (KeyError, AttributeError, ctypes.ArgumentError) is
refused before the call with one line naming the op or constructor, the argument and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from opforge.kernels.abi import Tensor

pytestmark = pytest.mark.slow


def t(array: np.ndarray, dtype: str | None = None) -> Tensor:
    return Tensor.from_numpy(array, dtype)


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def refused(error: type[Exception], message: str, call) -> None:
    """``call`` raises exactly ``error`` with exactly ``message``, on one line."""
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error
    assert str(info.value) == message
    assert "\n" not in str(info.value)


# --- Tensor.from_numpy: the descriptor must match the bytes ---


def test_an_override_of_another_itemsize_is_refused(cpu_library):
    # Labelled float32, a uint16 buffer would be read to twice its length (a segfault at a guard
    # page); the check comes before the library is involved at all.
    bits = np.zeros((3, 4), np.uint16)
    refused(
        ValueError,
        "Tensor.from_numpy: dtype 'float32' has 4-byte elements but the array's uint16 has 2-byte "
        "ones: an override only relabels bits of the same size (bfloat16 over uint16): give an "
        "array of 4-byte elements",
        lambda: t(bits, "float32"),
    )
    with pytest.raises(ValueError, match="'bfloat16' has 2-byte elements but the array's float32"):
        t(f32(3, 4), "bfloat16")


def test_bfloat16_over_uint16_bits_computes(cpu_library):
    x = f32(3, 8)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bfloat16
    y = np.zeros((3, 8), np.uint16)
    cpu_library.call("softmax", x=t(bits, "bfloat16"), dim=-1, y=t(y, "bfloat16"))
    as_f32 = (y.astype(np.uint32) << 16).view(np.float32)
    exact = softmax((bits.astype(np.uint32) << 16).view(np.float32), -1)
    np.testing.assert_allclose(as_f32, exact, rtol=2**-7)


def test_byte_strides_that_are_not_whole_elements_are_refused(cpu_library):
    # Field 'a' of a 5-byte record: strides of 5 bytes, which // 4 would turn into 1 element.
    records = np.zeros(12, dtype=[("a", "f4"), ("b", "u1")])
    records["a"] = np.arange(12)
    field = records["a"].reshape(3, 4)
    refused(
        ValueError,
        "Tensor.from_numpy: byte strides [20, 5] are not whole multiples of the 4-byte itemsize "
        "(a field of a structured array?): make it contiguous with numpy.ascontiguousarray(array)",
        lambda: t(field),
    )
    y = np.zeros((3, 4), np.float32)
    cpu_library.call("softmax", x=t(np.ascontiguousarray(field)), dim=-1, y=t(y))
    np.testing.assert_allclose(y, softmax(field, -1), rtol=1e-6)


def test_misaligned_data_is_refused(cpu_library):
    misaligned = np.zeros(17, np.uint8)[1:].view(np.float32)
    refused(
        ValueError,
        "Tensor.from_numpy: the array's data is not aligned to its itemsize: copy it with "
        "array.copy()",
        lambda: t(misaligned),
    )
    t(misaligned.copy())


def test_a_foreign_byte_order_is_refused(cpu_library):
    swapped = f32(4).astype(np.float32().dtype.newbyteorder("S"))
    with pytest.raises(ValueError, match=r"not in this machine's byte order: convert with"):
        t(swapped)


@pytest.mark.parametrize(
    ("array", "error", "message"),
    [
        (
            np.ones(4, np.int16),
            ValueError,
            "Tensor.from_numpy: dtype 'int16' is not one the kernel library takes (float32, "
            "float16, bfloat16, int64, float64, int32, int8, bool): convert with array.astype(...)",
        ),
        (
            np.array([None] * 4),
            TypeError,
            "Tensor.from_numpy: the array has dtype object (Python objects or fields), not plain "
            "numbers: convert it with array.astype(...) to a dtype the library takes (float32, "
            "float16, bfloat16, int64, float64, int32, int8, bool)",
        ),
        (
            [1.0, 2.0],
            TypeError,
            "Tensor.from_numpy: expected a numpy array, got list: wrap it with numpy.asarray(...)",
        ),
    ],
)
def test_arrays_the_library_cannot_take(cpu_library, array, error, message):
    refused(error, message, lambda: t(array))


def test_an_object_array_is_refused_even_under_an_override_of_its_size(cpu_library):
    # Object arrays hold 8-byte pointers: as "int64" they would be read as numbers.
    with pytest.raises(TypeError, match="dtype object"):
        t(np.array([None] * 4), "int64")


def test_from_pointer_checks_what_ctypes_would_wrap_or_fill(cpu_library):
    with pytest.raises(ValueError, match=r"^Tensor: dtype 'int16' is not one"):
        Tensor.from_pointer(0, (4,), None, "int16")
    refused(
        ValueError,
        "Tensor: strides [1] have 1 entries but shape [2, 2] has 2: give one stride per dimension",
        lambda: Tensor.from_pointer(0, (2, 2), (1,), "float32"),
    )
    with pytest.raises(OverflowError, match=r"^Tensor: shape\[0\] is 18446744073709551616, "):
        Tensor.from_pointer(0, (2**64,), None, "float32")


# --- KernelLibrary.call: scalars in the C type's range, arguments of the right kind ---

INT64_RANGE = "(-9223372036854775808 to 9223372036854775807): pass a value in range"


@pytest.mark.parametrize("dim", [2**64, 2**70, 2**64 - 1, 2**63, -(2**63) - 1])
def test_an_int_outside_int64_is_refused_not_wrapped(cpu_library, dim):
    # ctypes would pass 2**64 as 0 and 2**64 - 1 as -1: a softmax over another dim.
    y = np.full((3, 4), np.nan, np.float32)
    refused(
        OverflowError,
        f"opforge_softmax: dim is {dim}, outside the int64 range the library takes {INT64_RANGE}",
        lambda: cpu_library.call("softmax", x=t(f32(3, 4)), dim=dim, y=t(y)),
    )
    assert np.isnan(y).all(), "nothing was written"


def test_int_list_items_and_optional_ints_are_range_checked(cpu_library):
    x = f32(2, 6)
    with pytest.raises(
        OverflowError, match=r"^opforge_layer_norm: normalized_shape\[0\] is 18446744073709551622, "
    ):
        cpu_library.infer(
            "layer_norm",
            x=Tensor.meta((2, 6), "float32"),
            normalized_shape=[2**64 + 6],
            weight=None,
            bias=None,
            eps=1e-5,
        )
    with pytest.raises(OverflowError, match=r"^opforge_argmax: dim is 18446744073709551616"):
        cpu_library.call("argmax", x=t(x), dim=2**64, keepdim=False, out=t(np.zeros(6, np.int64)))


def test_numpy_scalars_are_taken(cpu_library):
    x, out = f32(3, 4), np.zeros((3, 1), np.int64)
    cpu_library.call("argmax", x=t(x), dim=np.int64(1), keepdim=np.bool_(True), out=t(out))
    np.testing.assert_array_equal(out, x.argmax(1)[:, None])
    a, b, total = f32(4), f32(4), np.zeros(4, np.float32)
    cpu_library.call("add", a=t(a), b=t(b), alpha=np.float32(0.5), out=t(total))
    np.testing.assert_allclose(total, a + 0.5 * b, rtol=1e-6)


def add(lib, **given) -> None:
    arguments = dict(a=t(f32(4)), b=t(f32(4)), alpha=1.0, out=t(np.zeros(4, np.float32)))
    lib.call("add", **{**arguments, **given})


def argmax(lib, **given) -> None:
    arguments = dict(x=t(f32(3, 4)), dim=1, keepdim=False, out=t(np.zeros(3, np.int64)))
    lib.call("argmax", **{**arguments, **given})


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda lib: lib.call("softmax", x=t(f32(3, 4)), dim=-1, y=None),
            TypeError,
            "opforge_softmax: y is required: describe an array with Tensor.from_numpy",
        ),
        (
            lambda lib: lib.call("softmax", x=[[1.0]], dim=-1, y=t(f32(1, 1))),
            TypeError,
            "opforge_softmax: x must be a Tensor, got [[1.0]] (list): describe an array with "
            "Tensor.from_numpy",
        ),
        (
            lambda lib: lib.call("softmax", x=t(f32(3, 4)), dim=None, y=t(f32(3, 4))),
            TypeError,
            "opforge_softmax: dim must be an int, got None (NoneType): pass an int",
        ),
        (
            lambda lib: lib.call("softmax", x=t(f32(3, 4)), dim=True, y=t(f32(3, 4))),
            TypeError,
            "opforge_softmax: dim must be an int, got True (bool): pass an int",
        ),
        (
            lambda lib: lib.call("softmax", x=t(f32(3, 4)), dim=1.0, y=t(f32(3, 4))),
            TypeError,
            "opforge_softmax: dim must be an int, got 1.0 (float): pass an int",
        ),
        (
            lambda lib: argmax(lib, keepdim=1),
            TypeError,
            "opforge_argmax: keepdim must be a bool, got 1 (int): pass True or False",
        ),
        (
            lambda lib: add(lib, alpha="2"),
            TypeError,
            "opforge_add: alpha must be a real number, got '2' (str): pass a float",
        ),
        (
            lambda lib: add(lib, alpha=10**400),
            OverflowError,
            "opforge_add: alpha is too large for a C double (an int of 401 digits): pass a float",
        ),
        (
            lambda lib: add(lib, stream=-1),
            OverflowError,
            "opforge_add: stream -1 is not a pointer value (0 to 2**64-1): pass the stream's "
            "handle (torch: stream.cuda_stream)",
        ),
        (
            lambda lib: lib.call("gelu", x=t(f32(4)), approximate="fast", y=t(f32(4))),
            ValueError,
            "opforge_gelu: approximate must be one of 'none', 'tanh', got 'fast' (str)",
        ),
        (
            lambda lib: lib.call("gelu", x=t(f32(4)), approximate=1, y=t(f32(4))),
            TypeError,
            "opforge_gelu: approximate must be one of 'none', 'tanh', got 1 (int)",
        ),
        (
            lambda lib: lib.call(
                "rms_norm",
                x=t(f32(2, 6)),
                normalized_shape="6",
                weight=None,
                eps=1e-5,
                y=t(f32(2, 6)),
                rstd=t(f32(2)),
            ),
            TypeError,
            "opforge_rms_norm: normalized_shape must be a sequence of ints, got '6' (str): pass "
            "a list",
        ),
        (
            lambda lib: add(lib, beta=1.0),
            TypeError,
            "opforge_add: unexpected argument 'beta' (its arguments: a, alpha, b, out)",
        ),
        (
            lambda lib: add(lib, out=t(np.broadcast_to(np.float32(0), (4,)))),
            ValueError,
            "opforge_add: out is written to but its array is read-only: give a writable array "
            "(array.copy())",
        ),
    ],
)
def test_arguments_of_the_wrong_kind_or_value(cpu_library, call, error, message):
    refused(error, message, lambda: call(cpu_library))


def test_an_unknown_op_is_named_with_the_ones_there_are(cpu_library):
    ops = ", ".join(cpu_library.signatures)
    message = f"unknown op 'nosuch': the kernel library has {ops}"
    refused(ValueError, message, lambda: cpu_library.call("nosuch", x=t(f32(4))))
    refused(ValueError, message, lambda: cpu_library.infer("nosuch"))


def test_a_read_only_input_is_fine(cpu_library):
    x = f32(3, 4)
    x.flags.writeable = False
    y = np.zeros((3, 4), np.float32)
    cpu_library.call("softmax", x=t(x), dim=-1, y=t(y))
    np.testing.assert_allclose(y, softmax(x, -1), rtol=1e-6)


def test_messages_stay_on_one_line_for_large_values(cpu_library):
    # An array's repr spans lines: the message names only its type.
    refused(
        TypeError,
        "opforge_softmax: dim must be an int, got ndarray: pass an int",
        lambda: cpu_library.call("softmax", x=t(f32(3, 4)), dim=np.zeros((5, 5)), y=t(f32(3, 4))),
    )
