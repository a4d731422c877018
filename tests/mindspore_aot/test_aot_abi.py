"""The AOT entry points through their C ABI, on CPU here and on a CUDA device, against the
float64 reference: every conformance case MindSpore can pass (dense buffers), in the parameter
layout the op table gives (inputs, the attribute input, outputs, updated copies)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance.case import Case
from tests.conformance.dtypes import from_storage, to_storage
from tests.conformance.runner import Check, all_cases, check, prepare
from tests.mindspore_aot.aot import AotLibrary, DeviceBuffers, HostBuffers, built_package

DENSE_CASES = [c for c in all_cases() if c.layout == "contiguous"]


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
    p = prepare(case)
    layout = lib.layouts[case.op]
    params, attrs, slots = [], [], {}
    for name, optional, _mutable, _dtypes in layout["tensors"]:
        values = p.tensors[name]
        if optional:
            attrs.append(("flag", values is not None))
        dtype = p.dtype(case, name)
        if values is None:
            values, dtype = np.zeros((0,)), "float32"  # MindSpore's placeholder
        slots[name] = len(params)
        params.append(buffers.put(to_storage(values, dtype), dtype))
    for name, kind, dim_of in layout["scalars"]:
        value = p.scalars[name]
        if dim_of is not None and value is not None:
            value = value % max(np.ndim(p.tensors[dim_of]), 1)
        attrs.append((kind, value))
    outputs, read = [], {}
    first = len(params) + 1
    for out in p.op.outputs:
        dtype = p.dtype(case, out.name)
        shape = np.shape(p.expected[out.name])
        poison = (
            np.full(shape, -7, np.int64)
            if dtype == "int64"
            else to_storage(np.full(shape, np.nan), dtype)
        )
        read[out.name] = (first + len(outputs), dtype)
        outputs.append(buffers.put(poison, dtype))
    for arg in p.op.tensors:
        if arg.mutable:
            given = p.tensors[arg.name]
            shape = np.shape(given) if given is not None else (0,)
            read[arg.name] = (first + len(outputs), "float32")
            outputs.append(buffers.put(np.zeros(shape, np.float32), "float32"))
    status = lib.call(case.op, params, attrs, outputs, buffers.stream)
    assert status == 0, lib.last_error()
    buffers.sync()
    checks = []
    for name, (index, dtype) in read.items():
        if name not in p.expected:
            continue
        raw = buffers.get(index - 1)  # the attribute input holds no buffer
        actual = np.asarray(raw).astype(np.int64) if dtype == "int64" else from_storage(raw, dtype)
        checks.append(check(case, p, name, actual, p.expected[name]))
    return checks


@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: c.id)
def test_cpu_entry_points(case):
    for c in run(library("cpu"), case, HostBuffers()):
        c.assert_close(case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: c.id)
def test_cuda_entry_points(case):
    pytest.importorskip("torch", reason="device buffers are allocated through torch")
    for c in run(library("cuda"), case, DeviceBuffers()):
        c.assert_close(case)


def test_failure_status_and_message():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    y = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("softmax", [x], [("int", 5)], [y]) != 0
    assert lib.last_error() == (
        "softmax: opforge_softmax: dim 5 is out of range for x of shape [2, 3] (valid: -2 to 1)"
    )


def test_wrong_parameter_count_is_refused():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("add", [x], [("float", 1.0)], [x]) != 0
    assert "add: expected 3 inputs and 1 outputs, MindSpore passed 3 parameters" in lib.last_error()


def test_unsupported_dtype_is_refused():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    assert lib.call("softmax", [(x[0], x[1], "complex64")], [("int", 1)], [x]) != 0
    assert "softmax: parameter 0 has dtype complex64" in lib.last_error()


def test_too_few_attribute_values_are_refused():
    lib = library("cpu")
    buffers = HostBuffers()
    x = buffers.put(np.zeros((2, 3), np.float32), "float32")
    out = buffers.put(np.zeros((2,), np.int64), "int64")
    assert lib.call("argmax", [x], [("int", 1)], [out]) != 0
    assert "argmax: the attribute input holds too few values" in lib.last_error()
