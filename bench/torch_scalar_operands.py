"""ot.add / ot.mul of a float16 CUDA tensor and a Python number, against torch: GPU time per call
over 50 calls in a row, and host time per call on a 16-element tensor. Needs a CUDA device and the
opforge_torch GPU wheel; prints one line per case (saved beside a GPU run's logs, as
bench/results/gpu-run-*/addperf.txt)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

import opforge.torch as ot


def gpu_us(call: Callable, n: int = 50) -> float:
    """GPU microseconds per call of ``call`` over ``n`` calls in a row, after a warm-up."""
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / n


def host_us(call: Callable, n: int = 200) -> float:
    """Host microseconds per call of ``call`` (the kernels queue behind)."""
    began = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - began) / n * 1e6


def main() -> None:
    """Print ours against torch's for each case."""
    h = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    g = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    x = torch.randn(16, device="cuda", dtype=torch.float16)
    cases = [
        ("add(h, h)", lambda t, u: ot.add(t, u), lambda t, u: torch.add(t, u)),
        ("add(h, 0.5)", lambda t, _: ot.add(t, 0.5), lambda t, _: torch.add(t, 0.5)),
        ("add(h, 0.1)", lambda t, _: ot.add(t, 0.1), lambda t, _: torch.add(t, 0.1)),
        ("mul(h, 0.1)", lambda t, _: ot.mul(t, 0.1), lambda t, _: torch.mul(t, 0.1)),
        ("mul(h, 2.0)", lambda t, _: ot.mul(t, 2.0), lambda t, _: torch.mul(t, 2.0)),
    ]
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    for label, ours, native in cases:
        diff = (ours(h, g).float() - native(h, g).float()).abs().max().item()
        big = [gpu_us(lambda f=f: f(h, g)) for f in (ours, native)]
        small = [host_us(lambda f=f: f(x, x)) for f in (ours, native)]
        print(
            f"{label:12s} GPU per call: ours {big[0]:7.1f} us torch {big[1]:7.1f} us | "
            f"host per call (16 elements): ours {small[0]:5.1f} us torch {small[1]:5.1f} us | "
            f"max |diff| {diff:.3g}"
        )


if __name__ == "__main__":
    main()
