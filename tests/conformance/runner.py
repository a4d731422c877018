"""Running conformance cases, generically over the op table: inputs, references, comparisons, and
the C ABI on host memory (numpy) or device memory. Nothing here knows an op: the op table says
what the arguments and outputs are, the op's module (tests/conformance/ops) makes its inputs and
computes its float64 reference.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opforge.kernels import optable
from opforge.kernels.abi import KernelLibrary, Tensor
from opforge.kernels.signatures import c_signatures
from tests.conformance import ops
from tests.conformance.case import Case
from tests.conformance.dtypes import from_storage, round_to, to_storage

REPO = Path(__file__).resolve().parents[2]
TABLE = optable.load(REPO / "kernels" / "ops.yaml")
SIGNATURES = c_signatures(TABLE)

# (rtol, atol) for outputs stored in the case's dtype, and for float32 statistics/parameters.
DATA_TOLERANCE = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
PARAM_TOLERANCE = (2e-4, 2e-4)


def all_cases() -> list[Case]:
    """Every op's cases, in op table order."""
    return [c for name in TABLE.ops for c in ops.module(name).CASES]


def load_library(path: Path) -> KernelLibrary:
    """The kernel library at ``path`` with the op table's calling conventions."""
    return KernelLibrary(path, SIGNATURES)


def is_data(arg: optable.Arg) -> bool:
    """Whether a tensor argument holds data (the case's dtype and layout) or parameters."""
    return bool(arg.checks.keys() & {"dtypes", "like", "broadcast"})


def output_dtype(case: Case, output: optable.Output) -> str:
    """The dtype of an output, by its shape rule."""
    if output.rule in ("like", "broadcast"):
        return case.dtype
    return "int64" if output.rule == "reduce" else "float32"


@dataclass(frozen=True)
class Prepared:
    """A case's inputs (float64 values by name), scalars and float64 reference outputs."""

    op: optable.Op
    tensors: dict
    scalars: dict
    expected: dict

    def dtype(self, case: Case, name: str) -> str:
        """The storage dtype of an input or output."""
        outputs = {o.name: o for o in self.op.outputs}
        if name in outputs:
            return output_dtype(case, outputs[name])
        return case.dtype if is_data(self.op.arg(name)) else "float32"

    def is_data(self, name: str) -> bool:
        """Whether an input or output is data (else parameters, statistics or indices)."""
        outputs = {o.name: o for o in self.op.outputs}
        if name in outputs:
            return outputs[name].rule in ("like", "broadcast")
        return is_data(self.op.arg(name))


def prepare(case: Case) -> Prepared:
    """Inputs and reference of ``case`` (deterministic per case id)."""
    module = ops.module(case.op)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    tensors = module.inputs(case, rng)
    scalars = case.arguments
    return Prepared(TABLE.ops[case.op], tensors, scalars, module.reference(**tensors, **scalars))


def written(op: optable.Op) -> list[str]:
    """What a call produces: the outputs, then the tensors it updates in place."""
    return [o.name for o in op.outputs] + [a.name for a in op.tensors if a.mutable]


@dataclass(frozen=True)
class Check:
    """One value to compare: its name, values (float64), reference and tolerance."""

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
            round_to(self.expected, self.dtype) if self.dtype != "int64" else self.expected,
            rtol=self.rtol,
            atol=self.atol,
            equal_nan=True,
            err_msg=f"{case.id}: {self.name}",
        )


def check(
    case: Case,
    prepared: Prepared,
    name: str,
    actual: np.ndarray,
    expected: np.ndarray,
    widen: float = 1.0,
    label: str | None = None,
) -> Check:
    """A Check of ``name`` (an input, for a gradient, or an output) with its dtype's tolerance,
    scaled by the op module's ``scale(name, tensors)`` where it has one."""
    dtype = prepared.dtype(case, name)
    if dtype == "int64":
        return Check(label or name, actual, expected, 0, 0, "int64")
    rtol, atol = DATA_TOLERANCE[case.dtype] if prepared.is_data(name) else PARAM_TOLERANCE
    scale = getattr(ops.module(case.op), "scale", lambda name, tensors: 1.0)(name, prepared.tensors)
    return Check(label or name, actual, expected, rtol * widen, atol * widen * scale, dtype)


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


class CudaMemory:
    """Tensors in CUDA device memory (allocated through torch), on torch's current stream."""

    def __init__(self, layout: str = "contiguous") -> None:
        import torch

        self.torch = torch
        self.layout = layout
        self.stream = torch.cuda.current_stream().cuda_stream

    def tensor(
        self, storage: np.ndarray, dtype: str, laid_out: bool = True
    ) -> tuple[Tensor, object]:
        """A device copy of ``storage`` in the case's layout (negative strides excepted)."""
        from opforge.kernels.abi import KDL_CUDA

        host = np.array(storage, order="C")
        torch = self.torch
        if dtype == "bfloat16":
            device = torch.from_numpy(host.view(np.int16)).cuda().view(torch.bfloat16)
        else:
            device = torch.from_numpy(host).cuda()
        layout = self.layout if laid_out else "contiguous"
        if device.dim() >= 2 and layout == "transposed":
            device = device.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif device.dim() >= 1 and layout == "strided":
            base = torch.zeros(
                *device.shape[:-1], device.shape[-1] * 2, dtype=device.dtype, device="cuda"
            )
            base[..., ::2] = device
            device = base[..., ::2]
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


def run_case(lib: KernelLibrary, case: Case, memory) -> list[Check]:
    """Run ``case`` through the C ABI in ``memory``; the checks against the reference."""
    p = prepare(case)
    arguments: dict[str, object] = dict(p.scalars)
    handles: dict[str, object] = {}
    for arg in p.op.tensors:
        values = p.tensors[arg.name]
        if values is None:
            arguments[arg.name] = None
            continue
        dtype = p.dtype(case, arg.name)
        arguments[arg.name], handles[arg.name] = memory.tensor(
            to_storage(values, dtype), dtype, laid_out=is_data(arg)
        )
    for out in p.op.outputs:
        dtype = p.dtype(case, out.name)
        shape = np.shape(p.expected[out.name])
        poison = (
            np.full(shape, -7, np.int64)
            if dtype == "int64"
            else to_storage(np.full(shape, np.nan), dtype)
        )
        arguments[out.name], handles[out.name] = memory.tensor(poison, dtype, laid_out=False)
    lib.call(case.op, stream=memory.stream, **arguments)
    memory.sync()
    checks = []
    for name in written(p.op):
        if name not in p.expected:
            continue
        dtype = p.dtype(case, name)
        actual = (
            from_storage(memory.read(handles[name]), dtype)
            if dtype != "int64"
            else (np.asarray(memory.read(handles[name])).astype(np.int64))
        )
        checks.append(check(case, p, name, actual, p.expected[name]))
    return checks
