"""Per-call time of opforge.torch ops against torch's own on a small tensor (4096 fp32).

Run with `nox -s bench-torch` (CPU) or `python bench/torch_overhead.py --device cuda`; needs the
opforge_torch wheel installed (`opforge dist install`). torch.utils.benchmark times the calls
(synchronising CUDA); prints a table and writes a new
bench/results/torch-overhead-<device>-<date>[-N].json.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import sys
from pathlib import Path

import torch
from results_file import save
from torch.utils import benchmark

import opforge.torch as ot

REPO = Path(__file__).resolve().parent.parent


def per_call_us(stmt: str, env: dict) -> float:
    """Median microseconds per call of ``stmt``."""
    timer = benchmark.Timer(stmt=stmt, globals=env, num_threads=1)
    # Warm up first: the first statement timed on CUDA otherwise carries lazy set-up (measured
    # 14 µs instead of 11 µs for the first row on an H100).
    timer.timeit(2000)
    return timer.blocked_autorange(min_run_time=1.0).median * 1e6


def main() -> int:
    """Time ours and torch's, print the table, save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument(
        "--out", default=str(REPO / "bench" / "results"), help="directory for the JSON"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    a = torch.randn(args.n, device=args.device)
    b = torch.randn(args.n, device=args.device)
    x = torch.randn(8, args.n // 8, device=args.device)
    one = torch.randn(1, device=args.device)
    h = a.half()
    env = {"torch": torch, "ot": ot, "a": a, "b": b, "x": x, "one": one, "h": h}
    pairs = [
        ("add, 1 element (fixed cost)", "ot.add(one, one)", "torch.add(one, one)"),
        ("add", "ot.add(a, b)", "torch.add(a, b)"),
        ("add a number", "ot.add(a, 0.1)", "torch.add(a, 0.1)"),
        ("mul float16 by a number", "ot.mul(h, 0.1)", "torch.mul(h, 0.1)"),
        ("add a number to float16", "ot.add(h, 0.1)", "torch.add(h, 0.1)"),
        ("softmax", "ot.softmax(x, -1)", "torch.softmax(x, -1)"),
        ("argmax", "ot.argmax(x, -1)", "torch.argmax(x, -1)"),
    ]
    rows = []
    for name, ours, native in pairs:
        o, n = per_call_us(ours, env), per_call_us(native, env)
        rows.append({"op": name, "ours_us": o, "torch_us": n, "ratio": o / n, "extra_us": o - n})
    device = (
        torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    )
    if args.device == "cpu":
        found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        device = f"{found.group(1).strip() if found else device} (1 thread)"
    result = {
        "device": device,
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "elements": args.n,
        "rows": rows,
    }
    print(f"{device}, torch {torch.__version__}, {args.n} fp32 elements, time per call")
    print("| op | ours (µs) | torch (µs) | ratio | extra (µs) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['op']} | {r['ours_us']:.2f} | {r['torch_us']:.2f} | {r['ratio']:.2f}x | {r['extra_us']:+.2f} |"
        )
    save(result, f"torch-overhead-{args.device}", device, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
