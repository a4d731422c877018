"""``opforge_add`` through the C ABI (ctypes + numpy), against a float64 numpy reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.dlpack import KDL_CUDA, TensorView, load_library
from tests.test_build import copy_project, opforge

pytestmark = pytest.mark.slow

OK, INVALID, UNSUPPORTED = 0, 1, 2


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """The CPU kernel library, built by ``opforge build --profile cpu``."""
    project = copy_project(tmp_path_factory.mktemp("abi"))
    result = opforge(project, "build", "--profile", "cpu", "--quiet")
    assert result.returncode == 0, result.stderr
    library = load_library(project / "dist" / "cpu" / "lib" / "libopforge_kernels.so")
    assert library.opforge_abi_version() == 1
    assert library.opforge_has_cuda() == 0
    return library


def _add(lib, a, b, alpha, out):
    views = [TensorView(x) for x in (a, b, out)]
    status = lib.opforge_add(views[0].ref, views[1].ref, alpha, views[2].ref, None)
    return status, lib.opforge_last_error().decode()


def _reference(a, b, alpha):
    return (a.astype(np.float64) + alpha * b.astype(np.float64)).astype(np.float32)


RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(4096,), (3, 5), (2, 3, 4, 5), (1,), (0,), (7, 0, 3), ()])
@pytest.mark.parametrize("alpha", [1.0, -2.5])
def test_contiguous(lib, shape, alpha):
    a, b = _rand(*shape), _rand(*shape)
    out = np.full(shape, np.nan, dtype=np.float32)
    status, message = _add(lib, a, b, alpha, out)
    assert (status, message) == (OK, "")
    np.testing.assert_allclose(out, _reference(a, b, alpha), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.T,  # transposed
        lambda x: x[::2, 1::3],  # stepped slices
        lambda x: x[::-1, ::-1],  # negative strides
        lambda x: x[:, 3],  # a column
    ],
)
def test_strided_inputs_and_output(lib, make):
    base_a, base_b = _rand(12, 10), _rand(12, 10)
    a, b = make(base_a), make(base_b)
    out_base = np.full((12, 10), np.nan, dtype=np.float32)
    out = make(out_base)
    status, message = _add(lib, a, b, 0.5, out)
    assert status == OK, message
    np.testing.assert_allclose(out, _reference(a, b, 0.5), rtol=1e-6, atol=1e-6)
    untouched = np.ones_like(out_base, dtype=bool)
    make(untouched)[...] = False
    assert np.isnan(out_base[untouched]).all(), "only the view's elements are written"


def test_mixed_layouts(lib):
    a = _rand(6, 8)
    b = np.asfortranarray(_rand(6, 8))
    out = np.empty((8, 6), dtype=np.float32).T
    assert _add(lib, a, b, 1.0, out)[0] == OK
    np.testing.assert_allclose(out, _reference(a, b, 1.0), rtol=1e-6)


def test_shape_mismatch_is_refused_with_a_message(lib):
    status, message = _add(lib, _rand(3, 4), _rand(4, 3), 1.0, np.empty((3, 4), np.float32))
    assert status == INVALID
    assert message == "opforge_add: shape mismatch: a is [3, 4] but b is [4, 3]"


def test_unsupported_dtype_is_refused(lib):
    a = np.ones(4)
    status, message = _add(lib, a, a, 1.0, np.empty(4))
    assert status == INVALID
    assert message == "opforge_add: dtype float64 is not supported (supported: float32)"


def test_dtype_mismatch_is_refused(lib):
    status, message = _add(lib, _rand(4), np.ones(4), 1.0, np.empty(4, np.float32))
    assert status == INVALID and "dtype mismatch: a is float32 but b is float64" in message


def test_cuda_tensors_in_a_cpu_build_are_unsupported(lib):
    views = [TensorView(_rand(4)) for _ in range(3)]
    for view in views:
        view.tensor.device.device_type = KDL_CUDA
    status = lib.opforge_add(views[0].ref, views[1].ref, 1.0, views[2].ref, None)
    assert status == UNSUPPORTED
    assert "built without CUDA" in lib.opforge_last_error().decode()


def test_null_tensor_is_refused(lib):
    view = TensorView(_rand(4))
    null = ctypes.POINTER(type(view.tensor))()
    assert lib.opforge_add(null, view.ref, 1.0, view.ref, None) == INVALID
    assert lib.opforge_last_error().decode() == "opforge_add: a is NULL"


def test_error_is_cleared_by_the_next_successful_call(lib):
    _add(lib, _rand(2), _rand(3), 1.0, _rand(2))
    assert lib.opforge_last_error().decode() != ""
    assert _add(lib, _rand(2), _rand(2), 1.0, _rand(2)) == (OK, "")
