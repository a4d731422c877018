"""GPU benchmark of the ops of issue #14 through the C ABI against torch's native ops: layer_norm
and rms_norm forward and backward, gelu forward and backward, and the broadcasting add/mul of a
(C,) bias onto (N, C) (plus a scalar operand and the same-shape case).

Run on a CUDA machine after `opforge build kernels --profile gpu`:
    python bench/gpu_new_ops.py [--library dist/gpu/lib/libopforge_kernels.so] [--quick]
        [--only norm|gelu|binary ...]
Times with CUDA events (median of repeats after warm-up, both on torch's current stream),
checks each output against torch's before timing, measures the device-to-device copy
bandwidth as the ceiling, prints a table naming the device and writes a new
bench/results/gpu-new-ops-<device>-<date>.json.

Bytes moved are the least each op must move: every input read once and every output written
once (statistics, parameters and parameter gradients included; not the partial column sums of
the backward's two-stage reduction, which are part of what is being measured).
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from gpu import bench_options, copy_bandwidth, desc, library_on_device, max_rel_err, time_ms
from results_file import save

from opforge.kernels.abi import BoundCall, KernelLibrary

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NORM_SHAPES = [(16384, 4096), (4096, 8192)]
EPS = 1e-5


class Bench:
    """Times ours against torch's native op and keeps one row per comparison."""

    def __init__(self, lib: KernelLibrary, copy_tbps: float) -> None:
        self.lib = lib
        self.copy_tbps = copy_tbps
        self.stream = torch.cuda.current_stream().cuda_stream
        self.rows: list[dict] = []

    def bind(self, op: str, **tensors_and_scalars) -> BoundCall:
        """The library's op with these arguments, on torch's current stream, ready to call."""
        return self.lib.bind(op, stream=self.stream, **tensors_and_scalars)

    def record(self, op, size, dtype, bytes_moved, ours, native, errors: dict) -> None:
        """Time both callables and keep the row."""
        ours_ms, torch_ms = time_ms(ours), time_ms(native)
        floor_ms = bytes_moved / (self.copy_tbps * 1e9)
        row = {
            "op": op,
            "size": size,
            "dtype": dtype,
            "bytes": bytes_moved,
            "floor_ms": floor_ms,
            "ours_ms": ours_ms,
            "torch_ms": torch_ms,
            "speedup": torch_ms / ours_ms,
            "ours_pct_copy": 100 * floor_ms / ours_ms,
            "torch_pct_copy": 100 * floor_ms / torch_ms,
            "max_rel_err": errors,
        }
        self.rows.append(row)
        print(
            f"  {op:<20} {size:<14} {dtype:<9} ours {ours_ms:8.4f} ms ({row['ours_pct_copy']:5.1f}%)"
            f"  torch {torch_ms:8.4f} ms ({row['torch_pct_copy']:5.1f}%)  x{row['speedup']:.2f}",
            flush=True,
        )

    def layer_norm(self, rows: int, n: int, name: str) -> None:
        """layer_norm forward and backward, weight and bias in x's dtype."""
        dt, size = DTYPES[name], f"{rows}x{n}"
        item = torch.finfo(dt).bits // 8
        x = torch.randn(rows, n, device="cuda", dtype=dt)
        w = torch.rand(n, device="cuda", dtype=dt) + 0.5
        b = torch.randn(n, device="cuda", dtype=dt)
        y, mean, rstd = (
            torch.empty_like(x),
            torch.empty(rows, device="cuda"),
            torch.empty(rows, device="cuda"),
        )
        args = {
            "x": desc(x),
            "normalized_shape": [n],
            "weight": desc(w),
            "bias": desc(b),
            "eps": EPS,
        }
        outs = {"y": desc(y), "mean": desc(mean), "rstd": desc(rstd)}

        ours = self.bind("layer_norm", **args, **outs)

        def native():
            return torch.native_layer_norm(x, [n], w, b, EPS)

        ours()
        ty, tm, tr = native()
        errors = {
            "y": max_rel_err(y, ty),
            "mean": max_rel_err(mean, tm.view(-1)),
            "rstd": max_rel_err(rstd, tr.view(-1)),
        }
        moved = 2 * rows * n * item + 2 * n * item + 8 * rows
        self.record("layer_norm", size, name, moved, ours, native, errors)

        dy = torch.randn_like(x)
        dx, dw, db = (
            torch.empty_like(x),
            torch.empty(n, device="cuda"),
            torch.empty(n, device="cuda"),
        )
        bargs = {
            "dy": desc(dy),
            "x": desc(x),
            "normalized_shape": [n],
            "mean": desc(mean),
            "rstd": desc(rstd),
            "weight": desc(w),
        }
        bouts = {"dx": desc(dx), "dweight": desc(dw), "dbias": desc(db)}

        ours_bwd = self.bind("layer_norm_backward", **bargs, **bouts)

        def native_bwd():
            return torch.ops.aten.native_layer_norm_backward(
                dy, x, [n], tm, tr, w, b, [True, True, True]
            )

        ours_bwd()
        tdx, tdw, tdb = native_bwd()
        errors = {
            "dx": max_rel_err(dx, tdx),
            "dweight": max_rel_err(dw, tdw),
            "dbias": max_rel_err(db, tdb),
        }
        moved = 3 * rows * n * item + 8 * rows + n * item + 8 * n
        self.record("layer_norm_backward", size, name, moved, ours_bwd, native_bwd, errors)

    def rms_norm(self, rows: int, n: int, name: str) -> None:
        """rms_norm forward and backward, weight in x's dtype (torch: its fused CUDA ops)."""
        dt, size = DTYPES[name], f"{rows}x{n}"
        item = torch.finfo(dt).bits // 8
        x = torch.randn(rows, n, device="cuda", dtype=dt)
        w = torch.rand(n, device="cuda", dtype=dt) + 0.5
        y, rstd = torch.empty_like(x), torch.empty(rows, device="cuda")
        args = {"x": desc(x), "normalized_shape": [n], "weight": desc(w), "eps": EPS}
        outs = {"y": desc(y), "rstd": desc(rstd)}

        ours = self.bind("rms_norm", **args, **outs)

        def native():
            return torch.ops.aten._fused_rms_norm(x, [n], w, EPS)

        ours()
        ty, tr = native()
        errors = {"y": max_rel_err(y, ty), "rstd": max_rel_err(rstd, tr.view(-1).float())}
        moved = 2 * rows * n * item + n * item + 4 * rows
        self.record("rms_norm", size, name, moved, ours, native, errors)

        dy = torch.randn_like(x)
        dx, dw = torch.empty_like(x), torch.empty(n, device="cuda")
        bargs = {
            "dy": desc(dy),
            "x": desc(x),
            "normalized_shape": [n],
            "rstd": desc(rstd),
            "weight": desc(w),
        }

        ours_bwd = self.bind("rms_norm_backward", **bargs, dx=desc(dx), dweight=desc(dw))

        def native_bwd():
            return torch.ops.aten._fused_rms_norm_backward(dy, x, [n], tr, w, [True, True])

        ours_bwd()
        tdx, tdw = native_bwd()
        errors = {"dx": max_rel_err(dx, tdx), "dweight": max_rel_err(dw, tdw)}
        moved = 3 * rows * n * item + 4 * rows + n * item + 4 * n
        self.record("rms_norm_backward", size, name, moved, ours_bwd, native_bwd, errors)

    def gelu(self, count: int, name: str, approximate: str) -> None:
        """gelu forward and backward on `count` elements."""
        dt, size = DTYPES[name], f"2^{count.bit_length() - 1}"
        item = torch.finfo(dt).bits // 8
        x = torch.randn(count, device="cuda", dtype=dt) * 3
        y = torch.empty_like(x)
        dy, dx = torch.randn_like(x), torch.empty_like(x)
        dxx, dyy, ddy, ddx = desc(x), desc(y), desc(dy), desc(dx)

        ours = self.bind("gelu", x=dxx, approximate=approximate, y=dyy)

        def native():
            return F.gelu(x, approximate=approximate)

        ours()
        errors = {"y": max_rel_err(y, native())}
        self.record(f"gelu[{approximate}]", size, name, 2 * count * item, ours, native, errors)

        ours_bwd = self.bind("gelu_backward", dy=ddy, x=dxx, approximate=approximate, dx=ddx)

        def native_bwd():
            return torch.ops.aten.gelu_backward(dy, x, approximate=approximate)

        ours_bwd()
        errors = {"dx": max_rel_err(dx, native_bwd())}
        op = f"gelu_backward[{approximate}]"
        self.record(op, size, name, 3 * count * item, ours_bwd, native_bwd, errors)

    def binary(self, op: str, a_shape: tuple, b_shape: tuple, name: str) -> None:
        """add (alpha 1) or mul (scale 1) of a and b broadcast together, torch writing into out=
        too."""
        dt = DTYPES[name]
        item = torch.finfo(dt).bits // 8
        a = torch.randn(a_shape, device="cuda", dtype=dt)
        b = torch.randn(b_shape, device="cuda", dtype=dt)
        out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), device="cuda", dtype=dt)
        da, db, do = desc(a), desc(b), desc(out)
        scalars = {"alpha": 1.0} if op == "add" else {"scale": 1.0}
        native_fn = torch.add if op == "add" else torch.mul

        ours = self.bind(op, a=da, b=db, out=do, **scalars)

        def native():
            return native_fn(a, b, out=out)

        ours()
        errors = {"out": max_rel_err(out, native_fn(a, b))}
        size = f"{'x'.join(map(str, a_shape)) or '()'}+{'x'.join(map(str, b_shape)) or '()'}"
        moved = (a.numel() + b.numel() + out.numel()) * item
        self.record(op, size, name, moved, ours, native, errors)


GROUPS = ("norm", "gelu", "binary")


def run(lib: KernelLibrary, quick: bool, groups: tuple[str, ...] = GROUPS) -> dict:
    """The comparisons of ``groups`` in every dtype; returns the results document."""
    scale = 4 if quick else 1
    bench = Bench(lib, copy_bandwidth((1 << 28) // scale))
    print(f"device-to-device copy: {bench.copy_tbps:.3f} TB/s", flush=True)
    for name in DTYPES:
        if "norm" in groups:
            for rows, n in NORM_SHAPES:
                bench.layer_norm(rows // scale, n, name)
                bench.rms_norm(rows // scale, n, name)
        if "gelu" in groups:
            for approximate in ("none", "tanh"):
                bench.gelu((1 << 28) // scale, name, approximate)
        if "binary" in groups:
            for op in ("add", "mul"):
                bench.binary(op, (16384 // scale, 4096), (4096,), name)
                bench.binary(op, (65536 // scale, 1024), (1024,), name)
            bench.binary("mul", ((1 << 28) // scale,), (), name)
            bench.binary("add", ((1 << 28) // scale,), ((1 << 28) // scale,), name)
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "copy_TBps": bench.copy_tbps,
        "quick": quick,
        "groups": list(groups),
        "rows": bench.rows,
    }


def table(result: dict) -> str:
    """The results as a markdown table."""
    lines = [
        f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}, "
        f"device-to-device copy {result['copy_TBps']:.2f} TB/s",
        "",
        "| op | size | dtype | MB moved | floor (ms) | ours (ms) | torch (ms) | torch/ours "
        "| ours % of copy | torch % of copy | max rel err vs torch |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        errors = ", ".join(f"{k} {v:.1e}" for k, v in r["max_rel_err"].items())
        lines.append(
            f"| {r['op']} | {r['size']} | {r['dtype']} | {r['bytes'] / 1e6:.1f} "
            f"| {r['floor_ms']:.4f} | {r['ours_ms']:.4f} | {r['torch_ms']:.4f} "
            f"| {r['speedup']:.2f}x | {r['ours_pct_copy']:.0f}% | {r['torch_pct_copy']:.0f}% "
            f"| {errors} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Benchmark, print the table, save the JSON."""
    parser = bench_options(__doc__)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROUPS,
        default=list(GROUPS),
        help="run only these groups of ops (norm: layer_norm and rms_norm)",
    )
    args = parser.parse_args()
    lib = library_on_device("gpu_new_ops.py", args.library)
    if lib is None:
        return 2
    result = run(lib, args.quick, tuple(args.only))
    print(table(result))
    save(result, "gpu-new-ops", result["device"], Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
