"""Host time per call against GPU time per call, for the norm cases of bench/gpu_new_ops.py:
whether back-to-back timing of a library is bound by the host (Python + C ABI + CUDA API)."""

import sys
import time

sys.path.insert(0, "bench")
import gpu_new_ops
import torch

from opforge.kernels import optable
from opforge.kernels.abi import KernelLibrary
from opforge.kernels.signatures import c_signatures


class HostBench(gpu_new_ops.Bench):
    def record(self, op, size, dtype, moved, ours, native, errors) -> None:
        if not op.endswith("backward") or size != "4096x8192":
            return
        line = [f"{op:20s} {size} {dtype:9s}"]
        for name, fn in (("ours", ours), ("torch", native)):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            n = 300
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            end.record()
            end.synchronize()
            line.append(
                f"{name}: host {(t1 - t0) / n * 1e6:6.1f} us, gpu {start.elapsed_time(end) / n * 1e3:6.1f} us"
            )
        print("  ".join(line), flush=True)


gpu_new_ops.Bench = HostBench
for path in sys.argv[1:]:
    print(path)
    lib = KernelLibrary(path, c_signatures(optable.load("kernels/ops.yaml")))
    gpu_new_ops.run(lib, False, ("norm",))
