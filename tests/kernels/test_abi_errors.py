"""Invalid and hostile calls through the C ABI: a status and one message naming the op and the
problem, never a crash or a silent wrong answer (element counts that overflow, outputs sharing
memory with inputs, descriptors with NULL parts, too many dimensions)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from opforge.kernels.abi import KDL_CUDA, DLTensor, KernelError, Tensor

pytestmark = pytest.mark.slow

INVALID, UNSUPPORTED, INVALID_DTYPE = 1, 2, 5


def t(array: np.ndarray) -> Tensor:
    return Tensor.from_numpy(np.asarray(array))


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def raises(status: int, message: str, call) -> None:
    with pytest.raises(KernelError) as info:
        call()
    assert info.value.status == status
    assert info.value.message == message


def test_shapes_that_do_not_broadcast(cpu_library):
    raises(
        INVALID,
        "opforge_add: shapes do not broadcast: a is [3, 4] but b is [4, 3]",
        lambda: cpu_library.call(
            "add", a=t(f32(3, 4)), b=t(f32(4, 3)), alpha=1.0, out=t(f32(3, 4))
        ),
    )


@pytest.mark.parametrize(("dtype", "name"), [(np.int64, "int64"), (np.bool_, "bool")])
def test_non_floating_input_is_refused_naming_its_dtype(cpu_library, dtype, name):
    values = np.ones(4, dtype=dtype)
    raises(
        INVALID_DTYPE,
        f"opforge_softmax: x has dtype {name} (supported: float32, float16, bfloat16)",
        lambda: cpu_library.call("softmax", x=t(values), dim=0, y=t(values)),
    )


def test_messages_name_numbers_as_given(cpu_library):
    x, half = f32(2, 6), np.ones(6, np.float16)
    stats = {"mean": t(f32(2)), "rstd": t(f32(2))}
    raises(
        INVALID_DTYPE,
        "opforge_layer_norm: weight must be float32, got float16",  # not "float32 or float32"
        lambda: cpu_library.call(
            "layer_norm",
            x=t(x),
            normalized_shape=[6],
            weight=t(half),
            bias=None,
            eps=1e-5,
            y=t(f32(2, 6)),
            **stats,
        ),
    )
    raises(
        INVALID,
        "opforge_batch_norm: eps must be at least 0, got -1e-09",
        lambda: batch_norm(cpu_library, f32(4, 3), eps=-1e-9),
    )


def test_output_of_the_wrong_dtype(cpu_library):
    raises(
        INVALID_DTYPE,
        "opforge_add: out must be float32, got float64",
        lambda: cpu_library.call("add", a=t(f32(4)), b=t(f32(4)), alpha=1.0, out=t(np.zeros(4))),
    )


@pytest.mark.parametrize("dim", [2, -3, 100])
def test_dim_out_of_range(cpu_library, dim):
    raises(
        INVALID,
        f"opforge_softmax: dim {dim} is out of range for x of shape [3, 4] (valid: -2 to 1)",
        lambda: cpu_library.call("softmax", x=t(f32(3, 4)), dim=dim, y=t(f32(3, 4))),
    )


def test_output_of_the_wrong_shape(cpu_library):
    raises(
        INVALID,
        "opforge_argmax: out must have shape [3], got [3, 1]",
        lambda: cpu_library.call(
            "argmax", x=t(f32(3, 4)), dim=1, keepdim=False, out=t(np.zeros((3, 1), np.int64))
        ),
    )


def test_reduction_over_an_empty_dim(cpu_library):
    raises(
        INVALID,
        "opforge_argmax: cannot reduce x of shape [3, 0] over dim 1, which has size 0",
        lambda: cpu_library.call(
            "argmax", x=t(f32(3, 0)), dim=1, keepdim=False, out=t(np.zeros(3, np.int64))
        ),
    )


def test_reduction_over_an_empty_dim_with_an_empty_result(cpu_library):
    # As torch.argmax of a 0 x 0 tensor over dim 0: refused, though the result has no element.
    raises(
        INVALID,
        "opforge_argmax: cannot reduce x of shape [0, 0] over dim 0, which has size 0",
        lambda: cpu_library.call(
            "argmax", x=t(f32(0, 0)), dim=0, keepdim=False, out=t(np.zeros(0, np.int64))
        ),
    )


def batch_norm(lib, x, **given):
    arguments = dict(
        x=t(x),
        weight=None,
        bias=None,
        running_mean=None,
        running_var=None,
        training=True,
        momentum=0.1,
        eps=1e-5,
        y=t(np.empty_like(x)),
        save_mean=t(np.empty(x.shape[1] if x.ndim > 1 else 1, np.float32)),
        save_invstd=t(np.empty(x.shape[1] if x.ndim > 1 else 1, np.float32)),
    )
    arguments.update(given)
    lib.call("batch_norm", **arguments)


@pytest.mark.parametrize(
    ("given", "status", "message"),
    [
        (
            {"weight": t(f32(4))},
            INVALID,
            "opforge_batch_norm: weight must have shape [3] (one per channel of x), got [4]",
        ),
        (
            {"weight": t(np.ones(3))},
            INVALID_DTYPE,
            "opforge_batch_norm: weight must be float32, got float64",
        ),
        (
            {"running_mean": t(np.zeros(3, np.float32))},
            INVALID,
            "opforge_batch_norm: give running_mean and running_var together, or none of them",
        ),
        (
            {"training": False},
            INVALID,
            "opforge_batch_norm: running_mean is required when training is false",
        ),
        (
            {"eps": -1.0},
            INVALID,
            "opforge_batch_norm: eps must be at least 0, got -1",
        ),
        ({"eps": float("inf")}, INVALID, "opforge_batch_norm: eps must be finite, got inf"),
    ],
)
def test_batch_norm_arguments(cpu_library, given, status, message):
    raises(status, message, lambda: batch_norm(cpu_library, f32(4, 3), **given))


def test_batch_norm_needs_two_values_per_channel(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm: needs at least 2 values per channel, got x of shape [1, 3]",
        lambda: batch_norm(cpu_library, f32(1, 3)),
    )


def test_batch_norm_rank(cpu_library):
    raises(
        INVALID,
        "opforge_batch_norm: x must have 2 to 4 dimensions, got shape [6]",
        lambda: batch_norm(cpu_library, f32(6)),
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
        lambda: cpu_library.call("add", a=views[0], b=views[1], alpha=1.0, out=views[2]),
    )


def test_mixed_devices_are_refused(cpu_library):
    cuda = t(f32(4))
    cuda.desc.device.device_type = KDL_CUDA
    raises(
        INVALID,
        "opforge_add: device mismatch: b is on cuda:0 but the other tensors are on cpu",
        lambda: cpu_library.call("add", a=t(f32(4)), b=cuda, alpha=1.0, out=t(f32(4))),
    )


def test_null_required_tensor(cpu_library):
    view = t(f32(4))
    null = ctypes.POINTER(DLTensor)()
    status = cpu_library._lib.opforge_add(null, view.ref, 1.0, view.ref, None)
    assert status == INVALID
    assert cpu_library._lib.opforge_last_error().decode() == "opforge_add: a is NULL"


def test_an_error_is_cleared_by_the_next_successful_call(cpu_library):
    with pytest.raises(KernelError):
        cpu_library.call("add", a=t(f32(2)), b=t(f32(3)), alpha=1.0, out=t(f32(2)))
    cpu_library.call("add", a=t(f32(2)), b=t(f32(2)), alpha=1.0, out=t(f32(2)))
    assert cpu_library._lib.opforge_last_error() == b""


def test_a_strided_output_writes_only_its_elements(cpu_library):
    base = np.full((6, 8), np.nan, dtype=np.float32)
    out = base[::2, 1::3]
    a, b = f32(*out.shape), f32(*out.shape)
    cpu_library.call("add", a=t(a), b=t(b), alpha=2.0, out=Tensor.from_numpy(out))
    np.testing.assert_allclose(out, a + 2.0 * b, rtol=1e-6)
    written = np.zeros(base.shape, bool)
    written[::2, 1::3] = True
    assert np.isnan(base[~written]).all()


def test_empty_tensors_with_zero_strides_are_valid(cpu_library):
    def empty():
        return Tensor.from_pointer(0, (0, 5), (0, 0), "float32")

    cpu_library.call("softmax", x=empty(), dim=-1, y=empty())
    cpu_library.call("add", a=empty(), b=empty(), alpha=1.0, out=empty())


# --- hostile descriptors: refused with a named error, nothing read or written ---


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        (
            (2**62, 4),
            "float16",
            "a of shape [4611686018427387904, 4] has more elements than int64 can count",
        ),
        (
            (2**32, 2**32),
            "float32",
            "a of shape [4294967296, 4294967296] has more elements than int64 can count",
        ),
        ((2**61, 2), "float32", "a has strides [2, 1] that reach beyond what int64 can address"),
    ],
)
def test_element_counts_that_overflow_are_refused(cpu_library, shape, dtype, message):
    # NULL data: the library must refuse before touching memory.
    huge = Tensor.from_pointer(0, shape, None, dtype)
    raises(
        INVALID,
        f"opforge_add: {message}",
        lambda: cpu_library.call("add", a=huge, b=huge, alpha=1.0, out=huge),
    )


def test_argmax_over_2_to_the_64_elements_is_refused(cpu_library):
    huge = Tensor.from_pointer(0, (2**32, 2**32), None, "float32")
    out = Tensor.from_pointer(0, (2**32,), None, "int64")
    raises(
        INVALID,
        "opforge_argmax: x of shape [4294967296, 4294967296] has more elements than int64 can count",
        lambda: cpu_library.call("argmax", x=huge, dim=0, keepdim=False, out=out),
    )


def test_too_many_dimensions_are_refused(cpu_library):
    deep = Tensor.from_pointer(0, (1,) * 17, None, "float32")
    raises(
        INVALID,
        "opforge_softmax: x has 17 dimensions (supported: 0 to 16)",
        lambda: cpu_library.call("softmax", x=deep, dim=0, y=deep),
    )


def test_an_output_partly_overlapping_an_input_is_refused(cpu_library):
    buffer = np.zeros(1001, np.float32)
    raises(
        INVALID,
        "opforge_add: out overlaps a in memory; give it memory of its own (or exactly the same view)",
        lambda: cpu_library.call(
            "add", a=t(buffer[:1000]), b=t(f32(1000)), alpha=1.0, out=t(buffer[1:])
        ),
    )
    assert not buffer.any(), "nothing was written"


def test_an_output_that_is_exactly_an_input_computes_in_place(cpu_library):
    a = f32(5, 7)
    expected = a + 0.5 * a
    cpu_library.call("add", a=t(a), b=t(a.copy()), alpha=0.5, out=t(a))
    np.testing.assert_allclose(a, expected, rtol=1e-6)


def test_an_output_with_overlapping_elements_is_refused(cpu_library):
    storage = np.zeros(4, np.float32)
    broadcast = Tensor.from_pointer(storage.ctypes.data, (4,), (0,), "float32")
    raises(
        INVALID,
        "opforge_add: out has overlapping elements (strides [0]); outputs need one address per element",
        lambda: cpu_library.call("add", a=t(f32(4)), b=t(f32(4)), alpha=1.0, out=broadcast),
    )


def test_two_outputs_sharing_memory_are_refused(cpu_library):
    x = f32(6, 3)
    stats = np.zeros(3, np.float32)
    raises(
        INVALID,
        "opforge_batch_norm: save_invstd and save_mean overlap in memory",
        lambda: batch_norm(cpu_library, x, save_mean=t(stats), save_invstd=t(stats)),
    )


def inference_aliases(x: np.ndarray, layout: str) -> tuple[dict, dict]:
    """batch_norm inference arguments whose saved statistics share the inputs' memory
    (``layout`` "same-view": save_invstd is running_var and save_mean is weight; "interleaved":
    save_mean[c] is weight[c + 1], strided views the C ABI does not check; "in-x": save_mean is
    every 20th element of x), and the expected y, save_mean and save_invstd, from the inputs as
    they were."""
    channels = x.shape[1]
    rng = np.random.default_rng(7)
    rm = rng.standard_normal(channels).astype(np.float32)
    rv = (rng.random(channels) + 0.5).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    shared = (rng.random(2 * channels + 2) + 0.5).astype(np.float32)
    weight = shared[0 : 2 * channels : 2]
    invstd = 1.0 / np.sqrt(rv.astype(np.float64) + 1e-5)
    shape = (1, channels) + (1,) * (x.ndim - 2)
    y = (x - rm.reshape(shape)) * (invstd * weight).reshape(shape) + bias.reshape(shape)
    expected = {"y": y, "save_mean": rm.copy(), "save_invstd": invstd}
    given = {"weight": weight, "bias": bias, "running_mean": rm, "running_var": rv}
    if layout == "same-view":
        given.update(save_mean=weight, save_invstd=rv)
    elif layout == "interleaved":
        given.update(save_mean=shared[2 : 2 * channels + 2 : 2], save_invstd=np.empty_like(rv))
    else:
        given.update(save_mean=x.reshape(-1)[::20], save_invstd=np.empty_like(rv))
    return given, expected


@pytest.mark.parametrize("layout", ["same-view", "interleaved", "in-x"])
def test_inference_saved_statistics_may_share_the_inputs_memory(cpu_library, layout):
    x = f32(4, 6, 5)
    given, expected = inference_aliases(x, layout)
    y = np.empty_like(x)
    batch_norm(
        cpu_library,
        x,
        training=False,
        y=t(y),
        **{name: t(array) for name, array in given.items()},
    )
    np.testing.assert_allclose(y, expected["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(given["save_mean"], expected["save_mean"], rtol=1e-6)
    np.testing.assert_allclose(given["save_invstd"], expected["save_invstd"], rtol=1e-6)


def test_infer_describes_outputs_and_checks_like_the_op(cpu_library):
    info = cpu_library.infer("argmax", x=Tensor.meta((3, 4, 5), "float16"), dim=-2, keepdim=True)
    assert info["out"].shape == (3, 1, 5) and info["out"].dtype == "int64"
    with pytest.raises(KernelError, match="opforge_softmax: dim 3 is out of range"):
        cpu_library.infer("softmax", x=Tensor.meta((3, 4), "float32"), dim=3)
