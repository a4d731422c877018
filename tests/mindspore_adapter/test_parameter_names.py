"""Refusals name the parameters of the opforge.mindspore function called (softmax's ``axis``,
add's ``other``), not the kernel arguments they are passed as (``dim``, ``b``), in PYNATIVE and
GRAPH mode."""

from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
ofm = pytest.importorskip("opforge.mindspore")

from mindspore import Tensor  # noqa: E402

from opforge.kernels import gen_mindspore  # noqa: E402
from tests.conformance.runner import TABLE  # noqa: E402
from tests.mindspore_adapter.harness import call  # noqa: E402


def f32(*shape):
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def ints(*shape):
    return Tensor(np.ones(shape, np.int32))


def _softmax_axis_tuple(x):
    return ofm.softmax(x, axis=(1,))


def _softmax_axis_2(x):
    return ofm.softmax(x, axis=2)


def _add(a, b):
    return ofm.add(a, b)


def _mul(a, b):
    return ofm.mul(a, b)


def _argmax(x):
    return ofm.argmax(x, 0)


def _gelu(x):
    return ofm.gelu(x)


def _batch_norm(x):
    return ofm.batch_norm(x, None, None, training=True)


def _batch_norm_no_stats(x):
    return ofm.batch_norm(x, None, None, training=False)


def _rms_norm_text_epsilon(x, gamma):
    return ofm.rms_norm(x, gamma, "1e-6")


def _stats_text_epsilon(x, gamma, beta):
    return ofm.layer_norm_stats(x, gamma, beta, 1, 1, "1e-6")


def _layer_norm_longer_shape(x):
    return ofm.layer_norm(x, (4, 2, 3))


# (id, function, its inputs, exception, its message after "opforge.mindspore.")
NAMED = [
    (
        "softmax-axis",
        _softmax_axis_tuple,
        lambda: (f32(2, 3),),
        TypeError,
        "softmax: axis must be an int, got (1,)",
    ),
    (
        "softmax-range",
        _softmax_axis_2,
        lambda: (f32(2, 3),),
        ValueError,
        "softmax: axis 2 is out of range for input of shape [2, 3] (valid: -2 to 1)",
    ),
    (
        "add-broadcast",
        _add,
        lambda: (f32(2, 3), f32(3, 2)),
        ValueError,
        "add: shapes do not broadcast: input is [2, 3] but other is [3, 2]",
    ),
    (
        "mul-broadcast",
        _mul,
        lambda: (f32(2, 3), f32(3, 2)),
        ValueError,
        "mul: shapes do not broadcast: input is [2, 3] but other is [3, 2]",
    ),
    (
        "argmax-dtype",
        _argmax,
        lambda: (ints(3),),
        TypeError,
        "argmax: input has dtype int32 (supported: float32, float16, bfloat16)",
    ),
    (
        "gelu-dtype",
        _gelu,
        lambda: (ints(3),),
        TypeError,
        "gelu: input has dtype int32 (supported: float32, float16, bfloat16)",
    ),
    (
        "batch_norm-dtype",
        _batch_norm,
        lambda: (ints(4, 3),),
        TypeError,
        "batch_norm: input_x has dtype int32 (supported: float32, float16, bfloat16)",
    ),
    (
        "batch_norm-rank",
        _batch_norm,
        lambda: (f32(4),),
        ValueError,
        "batch_norm: input_x must have 2 to 4 dimensions, got shape [4]",
    ),
    (
        "batch_norm-statistics",
        _batch_norm_no_stats,
        lambda: (f32(4, 3),),
        ValueError,
        "batch_norm: running_mean is required when training is false",
    ),
    (
        "rms_norm-epsilon",
        _rms_norm_text_epsilon,
        lambda: (f32(2, 3), f32(3)),
        TypeError,
        "rms_norm: epsilon must be a number, got '1e-6'",
    ),
    (
        "layer_norm_stats-epsilon",
        _stats_text_epsilon,
        lambda: (f32(2, 3), f32(3), f32(3)),
        TypeError,
        "layer_norm_stats: epsilon must be a number, got '1e-6'",
    ),
    (
        "layer_norm-suffix",
        _layer_norm_longer_shape,
        lambda: (f32(2, 3),),
        ValueError,
        "layer_norm: Given normalized_shape=[4, 2, 3], expected input with shape [*, 4, 2, 3], "
        "got input of shape [2, 3]",
    ),
]


@pytest.mark.parametrize(
    ("fn", "inputs", "error", "message"), [n[1:] for n in NAMED], ids=[n[0] for n in NAMED]
)
def test_refusals_name_the_functions_parameters(fn, inputs, error, message, mode):
    with pytest.raises(error) as raised:
        call(fn, mode)(*inputs())
    assert str(raised.value).splitlines()[0] == f"opforge.mindspore.{message}"


def test_every_function_names_its_kernel_arguments_by_its_parameters():
    # The generator's map, from each def's args: plain parameters, and the parameter each
    # tensor is taken from; the installed adapter words its errors by it.
    from opforge.mindspore import _runtime

    functions = {
        fn.name: (op, fn) for op in TABLE.ops.values() for fn in op.functions.get("mindspore", ())
    }
    names = {name: gen_mindspore.parameter_names(*pair) for name, pair in functions.items()}
    assert names["softmax"] == {"x": "input", "dim": "axis"}
    assert names["add"] == names["mul"] == {"a": "input", "b": "other"}
    assert names["layer_norm_stats"] == {
        "x": "input_x",
        "weight": "gamma",
        "bias": "beta",
        "eps": "epsilon",
    }
    assert names["rms_norm"] == {"weight": "gamma", "eps": "epsilon"}
    assert names["softmax_backward"] == {}
    for name, mapping in names.items():
        assert set(mapping.values()) <= {p.name for p in functions[name][1].params}, name
    assert {name: mapping for name, mapping in names.items() if mapping} == _runtime._PARAMETERS
