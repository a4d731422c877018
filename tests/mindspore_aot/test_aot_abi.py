"""The AOT entry points through their C ABI, on CPU here and on a CUDA device, against the
float64 reference: the forward conformance cases MindSpore can pass (dense, no negative strides)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance import reference
from tests.conformance.cases import CASES, Case, make_inputs
from tests.conformance.dtypes import from_storage, to_storage
from tests.conformance.runner import DATA_TOLERANCE, EPS, MOMENTUM, PARAM_TOLERANCE, Check
from tests.mindspore_aot.aot import AotLibrary, DeviceBuffers, HostBuffers, built_package

DENSE_CASES = [c for c in CASES if c.layout == "contiguous"]


def library(kind: str) -> AotLibrary:
    package = built_package(kind)
    if package is None:
        pytest.skip(
            f"no built _aot_{kind}.so under dist/: "
            f"`opforge build mindspore-adapter --profile {'gpu' if kind == 'cuda' else 'cpu'}`"
        )
    return AotLibrary(package, kind)


def run(lib: AotLibrary, case: Case, buffers) -> list[Check]:
    """``case`` through the op's entry point; checks against the reference."""
    import zlib

    inputs = make_inputs(case, zlib.crc32(case.id.encode()))
    dtype = case.dtype
    rtol, atol = DATA_TOLERANCE[dtype]
    prtol, patol = PARAM_TOLERANCE
    stored: list[str] = []

    def data(values=None, shape=None, kind="data"):
        values = np.full(shape, np.nan) if values is None else values
        stored.append(kind)
        storage_dtype = dtype if kind == "data" else "float32"
        return buffers.put(to_storage(values, storage_dtype), storage_dtype)

    def param(values=None, size=None):
        return data(values, (size,) if size is not None else None, kind="param")

    def read(index: int) -> np.ndarray:
        return from_storage(buffers.get(index), dtype if stored[index] == "data" else "float32")

    s = buffers.stream
    if case.op == "add":
        status = lib.call(
            "add",
            [data(inputs["a"]), data(inputs["b"])],
            (float(case.alpha),),
            [data(shape=case.shape)],
            s,
        )
        assert status == 0, lib.last_error()
        buffers.sync()
        return [
            Check(
                "out",
                read(2),
                reference.add(inputs["a"], inputs["b"], case.alpha),
                rtol,
                atol,
                dtype,
            )
        ]
    if case.op == "softmax":
        dim = case.dim % max(len(case.shape), 1)
        assert lib.call("softmax", [data(inputs["x"])], (dim,), [data(shape=case.shape)], s) == 0, (
            lib.last_error()
        )
        buffers.sync()
        return [Check("y", read(1), reference.softmax(inputs["x"], case.dim), rtol, atol, dtype)]
    if case.op == "softmax_backward":
        dim = case.dim % max(len(case.shape), 1)
        status = lib.call(
            "softmax_backward",
            [data(inputs["y"]), data(inputs["dy"])],
            (dim,),
            [data(shape=case.shape)],
            s,
        )
        assert status == 0, lib.last_error()
        buffers.sync()
        expected = reference.softmax_backward(inputs["y"], inputs["dy"], case.dim)
        return [Check("dx", read(2), expected, rtol, atol, dtype)]
    if case.op == "argmax":
        dim = case.dim % max(len(case.shape), 1)
        expected = reference.argmax(inputs["x"], case.dim, case.keepdim)
        x = data(inputs["x"])
        out = buffers.put(np.full(expected.shape, -1, np.int64), "int64")
        stored.append("index")
        assert lib.call("argmax", [x], (dim, case.keepdim), [out], s) == 0, lib.last_error()
        buffers.sync()
        return [
            Check(
                "out", buffers.get(1).astype(np.float64), expected.astype(np.float64), 0, 0, "int64"
            )
        ]
    channels = case.shape[1]
    weight, bias = inputs.get("weight"), inputs.get("bias")
    absent = np.zeros((0,))
    if case.op == "batch_norm_backward":
        status = lib.call(
            "batch_norm_backward",
            [
                data(inputs["dy"]),
                data(inputs["x"]),
                param(weight if weight is not None else absent),
                param(inputs["save_mean"]),
                param(inputs["save_invstd"]),
            ],
            (weight is not None, EPS),
            [data(shape=case.shape), param(size=channels), param(size=channels)],
            s,
        )
        assert status == 0, lib.last_error()
        buffers.sync()
        ref = reference.batch_norm_backward(
            inputs["dy"], inputs["x"], weight, inputs["save_mean"], inputs["save_invstd"]
        )
        count = max(1, inputs["x"].size // channels)
        scale = max(1.0, float(np.max(np.abs(inputs["dy"])))) if inputs["dy"].size else 1.0
        return [
            Check("dx", read(5), ref["dx"], rtol, atol * scale, dtype),
            Check("dweight", read(6), ref["dweight"], prtol, patol * count),
            Check("dbias", read(7), ref["dbias"], prtol, patol * count),
        ]
    training = case.op == "batch_norm_train"
    stats_size = channels if training else 0
    status = lib.call(
        "batch_norm",
        [
            data(inputs["x"]),
            param(weight if weight is not None else absent),
            param(bias if bias is not None else absent),
            param(inputs["running_mean"]),
            param(inputs["running_var"]),
        ],
        (training, weight is not None, bias is not None, True, MOMENTUM, EPS),
        [
            data(shape=case.shape),
            param(size=stats_size),
            param(size=stats_size),
            param(size=stats_size),
            param(size=stats_size),
        ],
        s,
    )
    assert status == 0, lib.last_error()
    buffers.sync()
    if not training:
        ref_y = reference.batch_norm_infer(
            inputs["x"], weight, bias, inputs["running_mean"], inputs["running_var"], EPS
        )
        return [Check("y", read(5), ref_y, rtol, atol, dtype)]
    ref = reference.batch_norm_train(
        inputs["x"], weight, bias, inputs["running_mean"], inputs["running_var"], MOMENTUM, EPS
    )
    checks = [Check("y", read(5), ref["y"], rtol, atol, dtype)]
    for i, name in enumerate(("save_mean", "save_invstd", "running_mean", "running_var")):
        checks.append(Check(name, read(6 + i), ref[name], prtol, patol))
    # The inputs stay as they were: the updated statistics are outputs.
    np.testing.assert_array_equal(read(3), np.asarray(inputs["running_mean"], np.float32))
    return checks


@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: c.id)
def test_cpu_entry_points(case):
    for check in run(library("cpu"), case, HostBuffers()):
        check.assert_close(case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: c.id)
def test_cuda_entry_points(case):
    pytest.importorskip("torch", reason="device buffers are allocated through torch")
    for check in run(library("cuda"), case, DeviceBuffers()):
        check.assert_close(case)


def test_failure_status_and_message():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    y = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("softmax", [x], (5,), [y]) != 0
    assert lib.last_error() == (
        "softmax: opforge_softmax_forward: dim 5 is out of range for a tensor of 2 dimension(s) "
        "(valid: -2 to 1)"
    )


def test_wrong_parameter_count_is_refused():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("add", [x], (1.0,), [x]) != 0
    assert "add: expected 3 inputs and 1 outputs, MindSpore passed 3 parameters" in lib.last_error()


def test_unsupported_dtype_is_refused():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("softmax", [(x[0], x[1], "complex64")], (1,), [x]) != 0
    assert "softmax: parameter 0 has dtype complex64" in lib.last_error()
