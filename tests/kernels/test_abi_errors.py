"""Invalid calls through the C ABI: a status and a message naming the op and the problem."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from opforge.abi import KDL_CUDA, DLTensor, KernelError, Tensor

pytestmark = pytest.mark.slow

INVALID, UNSUPPORTED = 1, 2


def t(array: np.ndarray) -> Tensor:
    return Tensor.from_numpy(np.asarray(array))


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def raises(status: int, message: str, fn, *args) -> None:
    with pytest.raises(KernelError) as info:
        fn(*args)
    assert info.value.status == status
    assert info.value.message == message


def test_add_shape_mismatch(cpu_library):
    raises(
        INVALID,
        "opforge_add: shape mismatch: a is [3, 4] but b is [4, 3]",
        cpu_library.add,
        t(f32(3, 4)),
        t(f32(4, 3)),
        1.0,
        t(f32(3, 4)),
    )


def test_integer_input_is_refused(cpu_library):
    ints = np.arange(4, dtype=np.int64)
    raises(
        INVALID,
        "opforge_softmax_forward: x has dtype int64 (supported: float32, float16, bfloat16)",
        cpu_library.softmax_forward,
        t(ints),
        0,
        t(ints),
    )


def test_dtype_mismatch(cpu_library):
    raises(
        INVALID,
        "opforge_add: dtype mismatch: a is float32 but out is float64",
        cpu_library.add,
        t(f32(4)),
        t(f32(4)),
        1.0,
        t(np.zeros(4)),
    )


@pytest.mark.parametrize("dim", [2, -3, 100])
def test_dim_out_of_range(cpu_library, dim):
    raises(
        INVALID,
        f"opforge_softmax_forward: dim {dim} is out of range for a tensor of 2 dimension(s) "
        "(valid: -2 to 1)",
        cpu_library.softmax_forward,
        t(f32(3, 4)),
        dim,
        t(f32(3, 4)),
    )


def test_argmax_output_shape_and_dtype(cpu_library):
    raises(
        INVALID,
        "opforge_argmax: out must have shape [3] for x of shape [3, 4], dim 1; got [3, 1]",
        cpu_library.argmax,
        t(f32(3, 4)),
        1,
        False,
        t(np.zeros((3, 1), np.int64)),
    )
    raises(
        INVALID,
        "opforge_argmax: out must be int64, got float32",
        cpu_library.argmax,
        t(f32(3, 4)),
        1,
        False,
        t(f32(3)),
    )


def test_argmax_over_an_empty_dim(cpu_library):
    raises(
        INVALID,
        "opforge_argmax: cannot take the argmax over dim 1, which has size 0 in x of shape [3, 0]",
        cpu_library.argmax,
        t(f32(3, 0)),
        1,
        False,
        t(np.zeros(3, np.int64)),
    )


def test_batch_norm_weight_of_the_wrong_size(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm_forward_training: weight must have shape [3] (one per channel), "
        "got [4]",
        cpu_library.batch_norm_forward_training,
        t(f32(4, 3)),
        t(f32(4)),
        None,
        None,
        None,
        0.1,
        1e-5,
        t(f32(4, 3)),
        None,
        None,
    )


def test_batch_norm_statistics_must_be_float32(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm_forward_inference: running_mean must be float32, got float64",
        cpu_library.batch_norm_forward_inference,
        t(f32(4, 3)),
        None,
        None,
        t(np.zeros(3)),
        t(np.ones(3, np.float32)),
        1e-5,
        t(f32(4, 3)),
    )


def test_batch_norm_needs_more_than_one_value_per_channel(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm_forward_training: training needs more than one value per channel, "
        "got x of shape [1, 3]",
        cpu_library.batch_norm_forward_training,
        t(f32(1, 3)),
        None,
        None,
        None,
        None,
        0.1,
        1e-5,
        t(f32(1, 3)),
        None,
        None,
    )


def test_batch_norm_running_stats_come_in_pairs(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm_forward_training: give both running_mean and running_var, or neither",
        cpu_library.batch_norm_forward_training,
        t(f32(4, 3)),
        None,
        None,
        t(np.zeros(3, np.float32)),
        None,
        0.1,
        1e-5,
        t(f32(4, 3)),
        None,
        None,
    )


def test_batch_norm_rank_and_eps(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm_forward_inference: x must be NxC, NxCxL or NxCxHxW, got shape [6]",
        cpu_library.batch_norm_forward_inference,
        t(f32(6)),
        None,
        None,
        t(np.zeros(6, np.float32)),
        t(np.ones(6, np.float32)),
        1e-5,
        t(f32(6)),
    )
    raises(
        INVALID,
        "opforge_batch_norm_forward_inference: eps must be finite and >= 0, got -1.000000",
        cpu_library.batch_norm_forward_inference,
        t(f32(2, 3)),
        None,
        None,
        t(np.zeros(3, np.float32)),
        t(np.ones(3, np.float32)),
        -1.0,
        t(f32(2, 3)),
    )


def test_cuda_tensors_in_a_cpu_build_are_unsupported(cpu_library):
    if cpu_library.has_cuda:
        pytest.skip(
            "the library under test is a GPU build (OPFORGE_TEST_DIST=gpu in a runtime image)"
        )
    views = [t(f32(4)) for _ in range(3)]
    for view in views:
        view.desc.device.device_type = KDL_CUDA
    raises(
        UNSUPPORTED,
        "opforge_add: tensors are on cuda:0 but this library was built without CUDA "
        "(OPFORGE_WITH_CUDA=OFF)",
        cpu_library.add,
        views[0],
        views[1],
        1.0,
        views[2],
    )


def test_null_required_tensor(cpu_library):
    view = t(f32(4))
    null = ctypes.POINTER(DLTensor)()
    status = cpu_library._lib.opforge_add(null, view.ref, 1.0, view.ref, None)
    assert status == INVALID
    assert cpu_library._lib.opforge_last_error().decode() == "opforge_add: a is NULL"


def test_an_error_is_cleared_by_the_next_successful_call(cpu_library):
    with pytest.raises(KernelError):
        cpu_library.add(t(f32(2)), t(f32(3)), 1.0, t(f32(2)))
    cpu_library.add(t(f32(2)), t(f32(2)), 1.0, t(f32(2)))
    assert cpu_library._lib.opforge_last_error() == b""


def test_a_strided_output_writes_only_its_elements(cpu_library):
    base = np.full((6, 8), np.nan, dtype=np.float32)
    out = base[::2, 1::3]
    a, b = f32(*out.shape), f32(*out.shape)
    cpu_library.add(t(a), t(b), 2.0, Tensor.from_numpy(out))
    np.testing.assert_allclose(out, a + 2.0 * b, rtol=1e-6)
    written = np.zeros(base.shape, bool)
    written[::2, 1::3] = True
    assert np.isnan(base[~written]).all()


def test_empty_tensors_with_zero_strides_are_valid(cpu_library):
    empty = Tensor.from_pointer(0, (0, 5), (0, 0), "float32")
    cpu_library.softmax_forward(empty, -1, Tensor.from_pointer(0, (0, 5), (0, 0), "float32"))
    cpu_library.add(empty, empty, 1.0, Tensor.from_pointer(0, (0, 5), (0, 0), "float32"))
