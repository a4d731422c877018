"""GPU benchmark: each op through the C ABI against torch's native op, same data, same run.

Run with `nox -s bench-gpu` (or `python bench/gpu.py --library dist/gpu/lib/libopforge_kernels.so`)
on a CUDA machine. Covers the cases of issue 15 (long softmax rows, reductions over dim 0,
transposed and row-strided views, argmax over a whole tensor, 2-D and N x C x L batch_norm) and
the cases that were already good (add, contiguous softmax and argmax, 4-D batch_norm). Each case
checks our output against torch's (float64 on a sample) before timing, times both with CUDA
events (median of repeats, after warm-up), and prints % of the measured device-to-device copy
bandwidth for `bytes`: what the op must move at least (each input read once, each output written
once). Writes a new bench/results/gpu-<device>-<date>.json; exits 1 if any output was wrong.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from results_file import save

from opforge.kernels import optable
from opforge.kernels.abi import KDL_CUDA, BoundCall, KernelError, KernelLibrary, Tensor
from opforge.kernels.signatures import c_signatures

REPO = Path(__file__).resolve().parent.parent
BN_IN = ("x", "weight", "bias", "running_mean", "running_var")
BN_OUT = ("y", "save_mean", "save_invstd")
BN_BWD_IN = ("dy", "x", "weight", "save_mean", "save_invstd")
BN_BWD_OUT = ("dx", "dweight", "dbias")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Largest max_rel_err (or wrong indices, for argmax) that still counts as correct.
TOLERANCE = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2, "int64": 0}
F = torch.nn.functional


def desc(t: torch.Tensor) -> Tensor:
    """A DLTensor descriptor of a CUDA tensor, with its own strides."""
    name = {v: k for k, v in TORCH_DTYPES.items()}.get(t.dtype) or str(t.dtype).split(".")[-1]
    return Tensor.from_pointer(t.data_ptr(), t.shape, t.stride(), name, KDL_CUDA, t.device.index)


def time_ms(fn: Callable[[], object], repeats: int = 7, min_ms: float = 60.0) -> float:
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
    """max |ours - ref| / max(|ref|), in float64 (NaN where only one side is NaN)."""
    ours, ref = ours.double(), ref.double()
    if not torch.equal(ours.isnan(), ref.isnan()):
        return float("nan")
    diff = (ours - ref).nan_to_num(0.0).abs().max()
    return float(diff / ref.nan_to_num(0.0).abs().max().clamp_min(1e-30))


def wrong_indices(x: torch.Tensor, ours: torch.Tensor, ref: torch.Tensor, dim: int | None) -> int:
    """argmax results whose value differs from torch's (a tie at the maximum counts as right)."""
    flat = x.reshape(-1) if dim is None else x
    if dim is None:
        return int(flat[ours] != flat[ref])
    picked = flat.gather(dim, ours.unsqueeze(dim)), flat.gather(dim, ref.unsqueeze(dim))
    return int((picked[0] != picked[1]).sum())


def every(t: torch.Tensor, dim: int, count: int = 48) -> torch.Tensor:
    """About ``count`` evenly spaced slices of 2-D ``t`` across the dim other than ``dim``."""
    other = 1 - (dim % 2)
    step = max(1, t.shape[other] // count)
    return t[::step] if other == 0 else t[:, ::step]


class Bench:
    """Times ours against torch's native op and records one row per comparison."""

    def __init__(self, lib: KernelLibrary, copy_bw: float) -> None:
        self.lib = lib
        self.copy_bw = copy_bw
        self.stream = torch.cuda.current_stream().cuda_stream
        self.rows: list[dict] = []
        self.refused: list[str] = []

    def run_case(self, case: Callable[..., None], label: str, *args) -> None:
        """case(label, *args); a library that refuses its layout (UNSUPPORTED) is noted, not fatal."""
        try:
            case(label, *args)
        except KernelError as exc:
            if exc.status_name != "UNSUPPORTED":
                raise
            print(f"  {label:<34} refused: {exc.message}", flush=True)
            self.refused.append(f"{label}: {exc.message}")

    def record(self, case, op, size, dtype, bytes_moved, ours, native, err) -> None:
        """Time both callables and keep the row; ``err`` was measured before timing."""
        ok = err <= TOLERANCE["int64" if op == "argmax" else dtype]  # NaN compares False
        ours_ms, torch_ms = time_ms(ours), time_ms(native)
        row = {
            "case": case,
            "op": op,
            "size": size,
            "dtype": dtype,
            "bytes": bytes_moved,
            "ours_ms": ours_ms,
            "torch_ms": torch_ms,
            "speedup": torch_ms / ours_ms,
            "ours_pct_copy": 100 * bytes_moved / ours_ms / 1e9 / self.copy_bw,
            "torch_pct_copy": 100 * bytes_moved / torch_ms / 1e9 / self.copy_bw,
            "max_rel_err": err,
            "correct": ok,
        }
        self.rows.append(row)
        print(
            f"  {case:<34} {dtype:<9} ours {ours_ms:8.4f} ms  torch {torch_ms:8.4f} ms  "
            f"{row['speedup']:5.2f}x  {row['ours_pct_copy']:5.1f}% of copy"
            + ("" if ok else f"  WRONG (error {err:.2e})"),
            flush=True,
        )

    def add(self, n: int, name: str) -> None:
        """add on n elements."""
        dt, s = TORCH_DTYPES[name], self.stream
        a, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
        out = torch.empty_like(a)
        da, db, do = desc(a), desc(b), desc(out)
        ours = self.lib.bind("add", a=da, b=db, alpha=0.5, out=do, stream=s)
        ours()
        err = max_rel_err(out, torch.add(a, b, alpha=0.5))
        self.record(
            f"add 2^{n.bit_length() - 1}",
            "add",
            f"2^{n.bit_length() - 1}",
            name,
            3 * n * a.element_size(),
            ours,
            lambda: torch.add(a, b, alpha=0.5, out=out),
            err,
        )

    def softmax(self, label: str, x: torch.Tensor, dim: int, backward: bool = False) -> None:
        """softmax (or its backward) of x, any view, along dim; y laid out like x."""
        s, name = self.stream, {v: k for k, v in TORCH_DTYPES.items()}[x.dtype]
        size = "x".join(map(str, x.shape))
        if not backward:
            y = torch.empty_like(x)
            dx_, dy_ = desc(x), desc(y)
            ours = self.lib.bind("softmax", x=dx_, dim=dim, y=dy_, stream=s)
            ours()
            err = max_rel_err(every(y, dim), torch.softmax(every(x, dim).double(), dim))
            self.record(
                label,
                "softmax",
                size,
                name,
                2 * x.numel() * x.element_size(),
                ours,
                lambda: torch.softmax(x, dim),
                err,
            )
            return
        ref = torch.softmax(x, dim)
        g, gx = torch.randn_like(x), torch.empty_like(x)
        dr, dg, dgx = desc(ref), desc(g), desc(gx)
        ours = self.lib.bind("softmax_backward", y=dr, dy=dg, dim=dim, dx=dgx, stream=s)
        ours()
        yd, gd = every(ref, dim).double(), every(g, dim).double()
        err = max_rel_err(every(gx, dim), yd * (gd - (gd * yd).sum(dim, keepdim=True)))
        self.record(
            label,
            "softmax_backward",
            size,
            name,
            3 * x.numel() * x.element_size(),
            ours,
            lambda: torch.ops.aten._softmax_backward_data(g, ref, dim, x.dtype),
            err,
        )

    def argmax(self, label: str, x: torch.Tensor, dim: int | None) -> None:
        """argmax of x along dim; dim None: over the whole tensor, as one flattened row."""
        s, name = self.stream, {v: k for k, v in TORCH_DTYPES.items()}[x.dtype]
        shape = () if dim is None else tuple(n for i, n in enumerate(x.shape) if i != dim % x.dim())
        idx = torch.empty(shape, dtype=torch.int64, device="cuda")
        dx_, di = desc(x), desc(idx)
        ours = self.lib.bind("argmax", x=dx_, dim=dim, keepdim=False, out=di, stream=s)
        ours()
        wrong = wrong_indices(x, idx, torch.argmax(x) if dim is None else torch.argmax(x, dim), dim)
        self.record(
            label,
            "argmax",
            "x".join(map(str, x.shape)),
            name,
            x.numel() * x.element_size(),
            ours,
            (lambda: torch.argmax(x)) if dim is None else (lambda: torch.argmax(x, dim)),
            wrong,
        )

    def batch_norm(self, label: str, shape: tuple[int, ...], name: str) -> None:
        """batch_norm training forward, backward and inference forward against torch's."""
        dt, s, c = TORCH_DTYPES[name], self.stream, shape[1]
        x = torch.randn(*shape, device="cuda", dtype=dt) * 2 + 1
        y = torch.empty_like(x)
        w, bias = torch.rand(c, device="cuda") + 0.5, torch.randn(c, device="cuda")
        rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        trm, trv = rm.clone(), rv.clone()
        sm, si = torch.empty(c, device="cuda"), torch.empty(c, device="cuda")
        size, item = "x".join(map(str, shape)), x.element_size()

        def forward(tensors: tuple, training: bool) -> BoundCall:
            d = [desc(t) for t in tensors]
            return self.lib.bind(
                "batch_norm",
                **dict(zip(BN_IN, d[:5], strict=True)),
                training=training,
                momentum=0.1,
                eps=1e-5,
                **dict(zip(BN_OUT, d[5:], strict=True)),
                stream=s,
            )

        ours = forward((x, w, bias, rm, rv, y, sm, si), True)

        def native():
            return F.batch_norm(x, trm, trv, w, bias, True, 0.1, 1e-5)

        ours()
        err = max_rel_err(y, native())
        self.record(
            f"{label} train fwd",
            "batch_norm_train_fwd",
            size,
            name,
            2 * x.numel() * item,
            ours,
            native,
            err,
        )

        gy, gx = torch.randn_like(x), torch.empty_like(x)
        dw, db = torch.empty(c, device="cuda"), torch.empty(c, device="cuda")
        bd = [desc(t) for t in (gy, x, w, sm, si, gx, dw, db)]

        ours_bwd = self.lib.bind(
            "batch_norm_backward",
            **dict(zip(BN_BWD_IN, bd[:5], strict=True)),
            training=True,
            **dict(zip(BN_BWD_OUT, bd[5:], strict=True)),
            stream=s,
        )

        def native_bwd():
            return torch.ops.aten.native_batch_norm_backward(
                gy, x, w, None, None, sm, si, True, 1e-5, [True, True, True]
            )

        ours_bwd()
        ref = native_bwd()
        err = max(max_rel_err(gx, ref[0]), max_rel_err(dw, ref[1]), max_rel_err(db, ref[2]))
        self.record(
            f"{label} train bwd",
            "batch_norm_backward",
            size,
            name,
            3 * x.numel() * item,
            ours_bwd,
            native_bwd,
            err,
        )

        yi = torch.empty_like(x)
        smi, sii = torch.empty(c, device="cuda"), torch.empty(c, device="cuda")
        ours_infer = forward((x, w, bias, rm, rv, yi, smi, sii), False)

        def native_infer():
            return F.batch_norm(x, rm, rv, w, bias, False, 0.1, 1e-5)

        ours_infer()
        err = max_rel_err(yi, native_infer())
        self.record(
            f"{label} inference",
            "batch_norm_infer_fwd",
            size,
            name,
            2 * x.numel() * item,
            ours_infer,
            native_infer,
            err,
        )


def copy_bandwidth(n: int) -> float:
    """Device-to-device copy in TB/s, counting bytes read plus bytes written."""
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    return 2 * n * 4 / time_ms(lambda: dst.copy_(src)) / 1e9


# The argmax cases, (label, shape, dtype, dim): issue 15's, then those that were already good.
ARGMAX_ISSUE_CASES = (
    ("argmax dim 0", (4096, 32768), torch.float32, 0),
    ("argmax whole tensor (one row)", (1 << 28,), torch.float32, None),
)
ARGMAX_GOOD_CASES = (
    ("argmax dim -1", (4096, 32768), torch.float32, -1),
    ("argmax dim -1", (4096, 32768), torch.bfloat16, -1),
)


# Softmax over long rows, (label, shape, dtype, backward, row_stride): issue 15's. `row_stride`:
# the rows are a slice of rows that long (a vocabulary padded to a multiple of 64), else None.
SOFTMAX_ROW_ISSUE_CASES = (
    ("softmax LM-head logits, dim -1", (32768, 50257), torch.bfloat16, False, None),
    ("softmax LM-head logits backward", (32768, 50257), torch.bfloat16, True, None),
    ("softmax padded-vocab slice, dim -1", (8192, 50257), torch.bfloat16, False, 50304),
)


def time_softmax_rows(bench: Bench, cases: tuple, q: int = 1) -> None:
    """bench.softmax along dim -1 over ``cases``, the rows divided by ``q``."""
    for label, (rows, length), dtype, backward, row_stride in cases:
        x = torch.randn(rows // q, row_stride or length, device="cuda", dtype=dtype)[:, :length]
        # A build whose C ABI still refuses strided CUDA tensors notes the slice as refused.
        bench.run_case(bench.softmax, label, x, -1, backward)
        del x


# Softmax over columns, (label, shape, dtype, dim, backward, transposed): issue 15's, then the
# other layouts the same kernels serve. `transposed`: the shape is the view's, laid out as the
# transpose of a contiguous tensor.
SOFTMAX_COLUMN_ISSUE_CASES = (
    ("softmax of a transposed view, dim -1", (8192, 8192), torch.float32, -1, False, True),
    ("softmax dim 0", (8192, 8192), torch.float32, 0, False, False),
    ("softmax dim 0 backward", (8192, 8192), torch.float32, 0, True, False),
    ("softmax dim 0", (8192, 8192), torch.bfloat16, 0, False, False),
)
SOFTMAX_COLUMN_MORE_CASES = (
    ("softmax dim 0 backward", (8192, 8192), torch.bfloat16, 0, True, False),
    ("softmax dim 1", (64, 2048, 512), torch.bfloat16, 1, False, False),
    ("softmax dim 1 backward", (64, 2048, 512), torch.bfloat16, 1, True, False),
    ("softmax dim 0", (2048, 64, 512), torch.bfloat16, 0, False, False),
)


# The batch_norm cases, (label, shape, dtype): issue 15's, then those that were already good.
BATCH_NORM_ISSUE_CASES = (
    ("batch_norm 2-D", (4096, 16384), "float32"),
    ("batch_norm NxCxL", (4096, 512, 16), "float32"),
)
BATCH_NORM_GOOD_CASES = (
    ("batch_norm 4-D", (32, 256, 56, 56), "float32"),
    ("batch_norm 4-D", (32, 256, 56, 56), "bfloat16"),
)
# More shapes users run (ResNet-50's at batch 32 to 256), for A/B runs of the batch_norm paths:
# channels of 25 KB to 3.2 MB, spatial sizes the pack does not divide (7x7), samples larger
# than a block's shared memory (256x256).
BATCH_NORM_MORE_CASES = (
    ("batch_norm ResNet stem", (32, 64, 112, 112), "float32"),
    ("batch_norm ResNet stage 2", (64, 128, 28, 28), "float32"),
    ("batch_norm ResNet stage 3", (32, 1024, 14, 14), "float32"),
    ("batch_norm ResNet stage 4", (128, 512, 7, 7), "float32"),
    ("batch_norm batch 256", (256, 64, 56, 56), "float32"),
    ("batch_norm large samples", (8, 32, 256, 256), "float32"),
    ("batch_norm NxCxL", (4096, 512, 16), "bfloat16"),
)


def time_batch_norm(bench: Bench, cases: tuple, q: int = 1) -> None:
    """bench.batch_norm over ``cases`` (label, shape, dtype), the batch divided by ``q``."""
    for label, shape, dtype in cases:
        bench.batch_norm(label, (shape[0] // q, *shape[1:]), dtype)


def time_softmax_columns(bench: Bench, cases: tuple, q: int = 1) -> None:
    """Time ``cases`` (as SOFTMAX_COLUMN_ISSUE_CASES), the view's first dimension divided by
    ``q``."""
    for label, (first, *rest), dtype, dim, backward, transposed in cases:
        shape = (first // q, *rest)
        if transposed:
            x = torch.randn(*reversed(shape), device="cuda", dtype=dtype).t()
        else:
            x = torch.randn(*shape, device="cuda", dtype=dtype)
        bench.run_case(bench.softmax, label, x, dim, backward)


def time_argmax(bench: Bench, cases: tuple, q: int = 1) -> None:
    """Time ``cases`` (as ARGMAX_ISSUE_CASES), the first dimension divided by ``q``."""
    for label, (first, *rest), dtype, dim in cases:
        bench.argmax(label, torch.randn(first // q, *rest, device="cuda", dtype=dtype), dim)


def run(lib: KernelLibrary, quick: bool) -> dict:
    """Time every case; returns the results document."""
    q = 4 if quick else 1  # --quick: every dimension that sets the size divided by 4
    bench = Bench(lib, copy_bandwidth((1 << 28) // q))

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    print("issue 15's cases:")
    time_softmax_rows(bench, SOFTMAX_ROW_ISSUE_CASES, q)
    time_softmax_columns(bench, SOFTMAX_COLUMN_ISSUE_CASES, q)
    time_argmax(bench, ARGMAX_ISSUE_CASES, q)
    time_batch_norm(bench, BATCH_NORM_ISSUE_CASES, q)
    print("cases that were already good:")
    bench.add((1 << 28) // q, "float32")
    bench.add((1 << 28) // q, "bfloat16")
    bench.softmax("softmax dim -1", randn(8192 // q, 8192), -1)
    bench.softmax("softmax dim -1", randn(8192 // q, 8192, dtype=torch.bfloat16), -1)
    bench.softmax("softmax dim -1 backward", randn(8192 // q, 8192), -1, backward=True)
    time_argmax(bench, ARGMAX_GOOD_CASES, q)
    time_batch_norm(bench, BATCH_NORM_GOOD_CASES, q)
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
        "refused": bench.refused,
    }


def table(result: dict) -> str:
    """The results as a markdown table."""
    lines = [
        f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}, "
        f"device-to-device copy {result['copy_TBps']:.2f} TB/s",
        "",
        "| case | size | dtype | ours (ms) | torch (ms) | ratio | ours % of copy | max rel err |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['case']} | {r['size']} | {r['dtype']} | {r['ours_ms']:.4f} | "
            f"{r['torch_ms']:.4f} | {r['speedup']:.2f}x | {r['ours_pct_copy']:.0f}% | "
            f"{r['max_rel_err']:.1e}{'' if r['correct'] else ' WRONG'} |"
        )
    return "\n".join(lines)


def bench_options(description: str) -> argparse.ArgumentParser:
    """The options of a benchmark of one kernel library: --library, --out, --quick."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--library", default=str(REPO / "dist" / "gpu" / "lib" / "libopforge_kernels.so")
    )
    parser.add_argument(
        "--out", default=str(REPO / "bench" / "results"), help="directory for the JSON"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    return parser


@functools.cache
def _signatures() -> dict:
    return c_signatures(optable.load(REPO / "kernels" / "ops.yaml"))


def library_on_device(script: str, path: str | Path) -> KernelLibrary | None:
    """The kernel library at ``path`` with the op table's signatures; None, once ``script`` has
    said why on stderr, where torch sees no CUDA device."""
    if not torch.cuda.is_available():
        print(
            f"bench/{script} needs a CUDA device (torch.cuda.is_available() is False)",
            file=sys.stderr,
        )
        return None
    return KernelLibrary(Path(path), _signatures())


def main() -> int:
    """Benchmark, print the table, save the JSON."""
    args = bench_options(__doc__).parse_args()
    lib = library_on_device("gpu.py", args.library)
    if lib is None:
        return 2
    result = run(lib, args.quick)
    print(table(result))
    save(result, "gpu", result["device"], Path(args.out))
    wrong = [f"{r['case']} ({r['dtype']})" for r in result["rows"] if not r["correct"]]
    if wrong:
        print(f"wrong outputs: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
