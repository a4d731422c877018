"""GPU benchmark: each op through the C ABI against torch's native op, same data, same run.

Run with `nox -s bench-gpu` (or `python bench/gpu.py --library dist/gpu/lib/libopforge_kernels.so`)
on a CUDA machine. Times with CUDA events (median of repeats, after warm-up), checks every output
against torch's before timing, measures device-to-device copy bandwidth as the ceiling, prints a
table and writes bench/results/<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from results_file import save

from opforge.abi import KDL_CUDA, KernelLibrary, Tensor

REPO = Path(__file__).resolve().parent.parent
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def desc(t: torch.Tensor, dtype: str | None = None) -> Tensor:
    """A DLTensor descriptor of a CUDA tensor."""
    name = (
        dtype or {v: k for k, v in TORCH_DTYPES.items()}.get(t.dtype) or str(t.dtype).split(".")[-1]
    )
    return Tensor.from_pointer(t.data_ptr(), t.shape, t.stride(), name, KDL_CUDA, t.device.index)


def time_ms(fn: Callable[[], None], repeats: int = 7, min_ms: float = 100.0) -> float:
    """Median milliseconds per call of ``fn`` (GPU time between CUDA events)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    iters = max(3, int(min_ms / max(start.elapsed_time(end), 1e-3)))
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def max_rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """max |ours - ref| / max(|ref|), in float64."""
    ours, ref = ours.double(), ref.double()
    return float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


class Bench:
    """Times ours against torch's native op and records one row per comparison."""

    def __init__(self, lib: KernelLibrary, copy_bw: float) -> None:
        self.lib = lib
        self.copy_bw = copy_bw
        self.stream = torch.cuda.current_stream().cuda_stream
        self.rows: list[dict] = []

    def record(self, op, size, dtype, bytes_moved, ours, native, err) -> None:
        """Time both callables and keep the row."""
        ours_ms, torch_ms = time_ms(ours), time_ms(native)
        self.rows.append(
            {
                "op": op,
                "size": size,
                "dtype": dtype,
                "ours_ms": ours_ms,
                "torch_ms": torch_ms,
                "speedup": torch_ms / ours_ms,
                "ours_pct_copy": 100 * bytes_moved / ours_ms / 1e9 / self.copy_bw,
                "torch_pct_copy": 100 * bytes_moved / torch_ms / 1e9 / self.copy_bw,
                "max_rel_err": err,
            }
        )
        print(
            f"  {op:<22} {size:<16} {dtype:<9} ours {ours_ms:8.4f} ms  torch {torch_ms:8.4f} ms",
            flush=True,
        )

    def add(self, n: int, name: str) -> None:
        """add on n elements."""
        dt, s = TORCH_DTYPES[name], self.stream
        a, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
        out = torch.empty_like(a)
        da, db, do = desc(a), desc(b), desc(out)
        self.lib.add(da, db, 0.5, do, s)
        err = max_rel_err(out, torch.add(a, b, alpha=0.5))
        self.record(
            "add",
            f"2^{n.bit_length() - 1}",
            name,
            3 * n * a.element_size(),
            lambda: self.lib.add(da, db, 0.5, do, s),
            lambda: torch.add(a, b, alpha=0.5, out=out),
            err,
        )

    def softmax(self, rows: int, cols: int, name: str) -> None:
        """softmax forward and backward over the last dim."""
        dt, s = TORCH_DTYPES[name], self.stream
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        dx, dy = desc(x), desc(y)
        self.lib.softmax_forward(dx, -1, dy, s)
        err = max_rel_err(y, torch.softmax(x.double(), -1))
        size, item = f"{rows}x{cols}", x.element_size()
        self.record(
            "softmax",
            size,
            name,
            2 * x.numel() * item,
            lambda: self.lib.softmax_forward(dx, -1, dy, s),
            lambda: torch.softmax(x, -1),
            err,
        )
        g, gx = torch.randn_like(x), torch.empty_like(x)
        dg, dgx = desc(g), desc(gx)
        ref = torch.softmax(x, -1)
        self.lib.softmax_backward(dy, dg, -1, dgx, s)

        def native():
            return torch.ops.aten._softmax_backward_data(g, ref, -1, dt)

        err = max_rel_err(gx, native())
        self.record(
            "softmax_backward",
            size,
            name,
            3 * x.numel() * item,
            lambda: self.lib.softmax_backward(dy, dg, -1, dgx, s),
            native,
            err,
        )

    def argmax(self, rows: int, cols: int, name: str) -> None:
        """argmax over the last dim."""
        dt, s = TORCH_DTYPES[name], self.stream
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        idx = torch.empty(rows, dtype=torch.int64, device="cuda")
        dx, di = desc(x), desc(idx, "int64")
        self.lib.argmax(dx, -1, False, di, s)
        wrong = float((idx != torch.argmax(x, -1)).sum())
        self.record(
            "argmax",
            f"{rows}x{cols}",
            name,
            x.numel() * x.element_size(),
            lambda: self.lib.argmax(dx, -1, False, di, s),
            lambda: torch.argmax(x, -1),
            wrong,
        )

    def batch_norm(self, shape: tuple[int, ...], name: str) -> None:
        """batch_norm training forward and backward (torch: F.batch_norm, aten backward)."""
        dt, s, c = TORCH_DTYPES[name], self.stream, shape[1]
        x = torch.randn(*shape, device="cuda", dtype=dt) * 2 + 1
        y = torch.empty_like(x)
        w, bias = torch.rand(c, device="cuda") + 0.5, torch.randn(c, device="cuda")
        rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        trm, trv = rm.clone(), rv.clone()
        sm, si = torch.empty(c, device="cuda"), torch.empty(c, device="cuda")
        d = [desc(t) for t in (x, w, bias, rm, rv, y, sm, si)]

        def ours():
            self.lib.batch_norm_forward_training(*d[:5], 0.1, 1e-5, *d[5:], s)

        def native():
            return torch.nn.functional.batch_norm(x, trm, trv, w, bias, True, 0.1, 1e-5)

        ours()
        err = max_rel_err(y, native())
        size, item = "x".join(map(str, shape)), x.element_size()
        self.record("batch_norm_train_fwd", size, name, 2 * x.numel() * item, ours, native, err)

        gy, gx = torch.randn_like(x), torch.empty_like(x)
        dw, db = torch.empty(c, device="cuda"), torch.empty(c, device="cuda")
        bd = [desc(t) for t in (gy, x, w, sm, si, gx, dw, db)]

        def ours_bwd():
            self.lib.batch_norm_backward(*bd[:5], 1e-5, *bd[5:], s)

        def native_bwd():
            return torch.ops.aten.native_batch_norm_backward(
                gy, x, w, None, None, sm, si, True, 1e-5, [True, True, True]
            )

        ours_bwd()
        err = max_rel_err(gx, native_bwd()[0])
        self.record(
            "batch_norm_backward", size, name, 3 * x.numel() * item, ours_bwd, native_bwd, err
        )


def copy_bandwidth(n: int) -> float:
    """Device-to-device copy in TB/s, counting bytes read plus bytes written."""
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    return 2 * n * 4 / time_ms(lambda: dst.copy_(src)) / 1e9


def run(lib: KernelLibrary, quick: bool) -> dict:
    """Time every op in every dtype; returns the results document."""
    scale = 4 if quick else 1
    bench = Bench(lib, copy_bandwidth((1 << 28) // scale))
    for name in TORCH_DTYPES:
        bench.add((1 << 28) // scale, name)
        bench.softmax(8192 // scale, 8192, name)
        bench.argmax(4096 // scale, 32768, name)
        bench.batch_norm((4096 // scale, 16384), name)
        bench.batch_norm((32 // scale, 256, 56, 56), name)
    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "copy_TBps": bench.copy_bw,
        "quick": quick,
        "rows": bench.rows,
    }


def table(result: dict) -> str:
    """The results as a markdown table."""
    lines = [
        f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}, "
        f"device-to-device copy {result['copy_TBps']:.2f} TB/s",
        "",
        "| op | size | dtype | ours (ms) | torch (ms) | ratio | ours % of copy | max rel err |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['op']} | {r['size']} | {r['dtype']} | {r['ours_ms']:.4f} | {r['torch_ms']:.4f} "
            f"| {r['speedup']:.2f}x | {r['ours_pct_copy']:.0f}% | {r['max_rel_err']:.1e} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Benchmark, print the table, save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--library", default=str(REPO / "dist" / "gpu" / "lib" / "libopforge_kernels.so")
    )
    parser.add_argument(
        "--out", default=str(REPO / "bench" / "results"), help="directory for the JSON"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "bench/gpu.py needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr
        )
        return 2
    lib = KernelLibrary(Path(args.library))
    result = run(lib, args.quick)
    print(table(result))
    save(result, "gpu", result["device"], Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
