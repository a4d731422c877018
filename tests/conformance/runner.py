"""Running a conformance case through the C ABI, on host memory (numpy) or device memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opforge.abi import KernelLibrary, Tensor
from tests.conformance import reference
from tests.conformance.cases import Case, make_inputs
from tests.conformance.dtypes import from_storage, round_to, to_storage

MOMENTUM = 0.1
EPS = 1e-5

# (rtol, atol) for outputs stored in the case's dtype, and for float32 statistics.
DATA_TOLERANCE = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
PARAM_TOLERANCE = (2e-4, 2e-4)


def lay_out(storage: np.ndarray, layout: str) -> np.ndarray:
    """A view holding ``storage``'s values with the given memory layout."""
    if layout == "contiguous" or storage.ndim == 0:
        return np.array(storage, order="C")  # ascontiguousarray would turn 0-d into 1-d
    if layout == "transposed" and storage.ndim >= 2:
        return np.ascontiguousarray(storage.swapaxes(-1, -2)).swapaxes(-1, -2)
    if layout == "strided":
        base = np.zeros((*storage.shape[:-1], storage.shape[-1] * 2), dtype=storage.dtype)
        base[..., ::2] = storage
        return base[..., ::2]
    if layout == "reversed":
        return np.ascontiguousarray(storage[..., ::-1])[..., ::-1]
    return np.array(storage, order="C")


class HostMemory:
    """Tensors in numpy arrays, with the case's layout."""

    stream = None

    def __init__(self, layout: str = "contiguous") -> None:
        self.layout = layout

    def tensor(
        self, storage: np.ndarray, dtype: str, laid_out: bool = True
    ) -> tuple[Tensor, object]:
        """A descriptor of ``storage`` (copied into the layout) and the array to read back."""
        array = lay_out(storage, self.layout if laid_out else "contiguous")
        return Tensor.from_numpy(array, dtype), array

    def read(self, handle: object) -> np.ndarray:
        """The storage array after the call."""
        return np.asarray(handle)

    def sync(self) -> None:
        """Nothing to wait for on the host."""


@dataclass(frozen=True)
class Check:
    """One output to compare: its name, values (float64), reference and tolerance."""

    name: str
    actual: np.ndarray
    expected: np.ndarray
    rtol: float
    atol: float
    dtype: str = "float32"

    def assert_close(self, case: Case) -> None:
        """Equal within tolerance, NaN where the reference has NaN, and nothing unwritten."""
        assert self.actual.shape == self.expected.shape, (self.name, self.actual.shape)
        np.testing.assert_allclose(
            self.actual,
            # The best any implementation can do is the exact result rounded to the output dtype.
            round_to(self.expected, self.dtype),
            rtol=self.rtol,
            atol=self.atol,
            equal_nan=True,
            err_msg=f"{case.id}: {self.name}",
        )


def run_case(lib: KernelLibrary, case: Case, memory, seed: int = 0) -> list[Check]:
    """Run ``case`` through ``lib`` in ``memory``; return what to compare with the reference."""
    inputs = make_inputs(case, seed)
    dtype = case.dtype
    handles: dict[str, object] = {}

    def data(name: str, values: np.ndarray | None = None, shape=None) -> Tensor:
        values = np.full(shape, np.nan) if values is None else values
        desc, handles[name] = memory.tensor(to_storage(values, dtype), dtype)
        return desc

    def param(name: str, values: np.ndarray | None = None, size: int | None = None) -> Tensor:
        values = np.full(size, np.nan) if values is None else values
        desc, handles[name] = memory.tensor(
            to_storage(values, "float32"), "float32", laid_out=False
        )
        return desc

    def result(name: str, kind: str = "data") -> np.ndarray:
        return from_storage(memory.read(handles[name]), dtype if kind == "data" else "float32")

    rtol, atol = DATA_TOLERANCE[dtype]
    prtol, patol = PARAM_TOLERANCE
    s = memory.stream
    if case.op == "add":
        lib.add(
            data("a", inputs["a"]),
            data("b", inputs["b"]),
            case.alpha,
            data("out", shape=case.shape),
            s,
        )
        memory.sync()
        expected = reference.add(inputs["a"], inputs["b"], case.alpha)
        return [Check("out", result("out"), expected, rtol, atol, dtype)]
    if case.op == "softmax":
        lib.softmax_forward(data("x", inputs["x"]), case.dim, data("y", shape=case.shape), s)
        memory.sync()
        return [
            Check("y", result("y"), reference.softmax(inputs["x"], case.dim), rtol, atol, dtype)
        ]
    if case.op == "softmax_backward":
        y, dy = inputs["y"], inputs["dy"]
        lib.softmax_backward(
            data("y", y), data("dy", dy), case.dim, data("dx", shape=case.shape), s
        )
        memory.sync()
        return [
            Check(
                "dx", result("dx"), reference.softmax_backward(y, dy, case.dim), rtol, atol, dtype
            )
        ]
    if case.op == "argmax":
        expected = reference.argmax(inputs["x"], case.dim, case.keepdim)
        out, handles["out"] = memory.tensor(
            np.full(expected.shape, -7, np.int64), "int64", laid_out=False
        )
        lib.argmax(data("x", inputs["x"]), case.dim, case.keepdim, out, s)
        memory.sync()
        actual = np.asarray(memory.read(handles["out"])).astype(np.float64)
        return [Check("out", actual, expected.astype(np.float64), 0, 0, "int64")]

    channels = case.shape[1]
    weight = param("weight", inputs["weight"]) if case.affine else None
    bias = param("bias", inputs["bias"]) if case.affine else None
    w, b = inputs.get("weight"), inputs.get("bias")
    if case.op == "batch_norm_train":
        rm, rv = (
            param("running_mean", inputs["running_mean"]),
            param("running_var", inputs["running_var"]),
        )
        lib.batch_norm_forward_training(
            data("x", inputs["x"]),
            weight,
            bias,
            rm,
            rv,
            MOMENTUM,
            EPS,
            data("y", shape=case.shape),
            param("save_mean", size=channels),
            param("save_invstd", size=channels),
            s,
        )
        memory.sync()
        ref = reference.batch_norm_train(
            inputs["x"], w, b, inputs["running_mean"], inputs["running_var"], MOMENTUM, EPS
        )
        checks = [Check("y", result("y"), ref["y"], rtol, atol, dtype)]
        for name in ("save_mean", "save_invstd", "running_mean", "running_var"):
            checks.append(Check(name, result(name, "param"), ref[name], prtol, patol))
        return checks
    if case.op == "batch_norm_infer":
        lib.batch_norm_forward_inference(
            data("x", inputs["x"]),
            weight,
            bias,
            param("running_mean", inputs["running_mean"]),
            param("running_var", inputs["running_var"]),
            EPS,
            data("y", shape=case.shape),
            s,
        )
        memory.sync()
        expected = reference.batch_norm_infer(
            inputs["x"], w, b, inputs["running_mean"], inputs["running_var"], EPS
        )
        return [Check("y", result("y"), expected, rtol, atol, dtype)]
    lib.batch_norm_backward(
        data("dy", inputs["dy"]),
        data("x", inputs["x"]),
        weight,
        param("save_mean", inputs["save_mean"]),
        param("save_invstd", inputs["save_invstd"]),
        EPS,
        data("dx", shape=case.shape),
        param("dweight", size=channels),
        param("dbias", size=channels),
        s,
    )
    memory.sync()
    ref = reference.batch_norm_backward(
        inputs["dy"], inputs["x"], w, inputs["save_mean"], inputs["save_invstd"]
    )
    # dx sums many terms of either sign: compare against the scale of its inputs.
    scale = float(np.max(np.abs(inputs["dy"]))) if inputs["dy"].size else 1.0
    count = max(1, inputs["x"].size // channels)
    return [
        Check("dx", result("dx"), ref["dx"], rtol, atol * max(1.0, scale), dtype),
        Check("dweight", result("dweight", "param"), ref["dweight"], prtol, patol * count),
        Check("dbias", result("dbias", "param"), ref["dbias"], prtol, patol * count),
    ]


class CudaMemory:
    """Tensors in CUDA device memory (allocated through torch), on torch's current stream."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.stream = torch.cuda.current_stream().cuda_stream

    def tensor(
        self, storage: np.ndarray, dtype: str, laid_out: bool = True
    ) -> tuple[Tensor, object]:
        """A device copy of ``storage`` (contiguous) and its descriptor."""
        from opforge.abi import KDL_CUDA

        host = np.array(storage, order="C")
        if dtype == "bfloat16":
            device = self.torch.from_numpy(host.view(np.int16)).cuda().view(self.torch.bfloat16)
        else:
            device = self.torch.from_numpy(host).cuda()
        desc = Tensor.from_pointer(
            device.data_ptr(), device.shape, device.stride(), dtype, KDL_CUDA, device.device.index
        )
        return desc, (device, dtype)

    def read(self, handle: object) -> np.ndarray:
        """The device tensor copied back to a host storage array."""
        device, dtype = handle
        if dtype == "bfloat16":
            return device.view(self.torch.int16).cpu().numpy().view(np.uint16)
        return device.cpu().numpy()

    def sync(self) -> None:
        """Wait for the device."""
        self.torch.cuda.synchronize()
