"""Per-call time of opforge.mindspore.add against MindSpore's ops.add on 4096 fp32 (CPU).

Run with `nox -s bench-mindspore`; needs the opforge_mindspore wheel installed. PYNATIVE: the
function called in a loop, the result read once at the end (MindSpore runs ops asynchronously).
GRAPH: a compiled Cell holding the one op, called in a loop. The two are measured in alternating
rounds and the best round of each is kept, so machine noise hits both alike. Prints a table and
writes bench/results/mindspore-overhead-<cpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from results_file import save

import opforge.mindspore as ofm

REPO = Path(__file__).resolve().parent.parent


class OneOp(ms.nn.Cell):
    """A Cell computing ``fn(a, b)``, compiled to a graph in GRAPH mode."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def construct(self, a, b):
        return self.fn(a, b)


def ours(a, b):
    return ofm.add(a, b)


def native(a, b):
    return ops.add(a, b)


def custom_floor():
    """The bare ops.Custom primitive with its attribute input: MindSpore's own cost of a Custom
    call, the floor under any ops.Custom-based adapter."""
    from opforge.mindspore._attrs import attribute_tensor
    from opforge.mindspore._library import device_kind
    from opforge.mindspore._ops import _make_primitive

    primitive, attrs = _make_primitive("add", device_kind()), attribute_tensor((1.0,))

    def bare(a, b):
        return primitive(a, b, attrs)

    return bare


def best_us(fns: dict, a: Tensor, b: Tensor, calls: int, rounds: int) -> dict[str, float]:
    """Best per-call microseconds of each function over alternating rounds."""
    for fn in fns.values():
        for _ in range(100):
            fn(a, b)
        fn(a, b).asnumpy()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                y = fn(a, b)
            y.asnumpy()
            best[name] = min(best[name], (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> int:
    """Time both modes, print the table, save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    ms.set_device("CPU")
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal(args.n).astype(np.float32))
    b = Tensor(rng.standard_normal(args.n).astype(np.float32))
    rows = []
    for mode_name, mode in (("PYNATIVE", ms.PYNATIVE_MODE), ("GRAPH", ms.GRAPH_MODE)):
        ms.set_context(mode=mode)
        if mode == ms.GRAPH_MODE:
            fns = {"ours": OneOp(ours), "native": OneOp(native)}
        else:
            fns = {"ours": ours, "native": native, "custom": custom_floor()}
        t = best_us(fns, a, b, args.calls, args.rounds)
        rows.append(
            {
                "mode": mode_name,
                "ours_us": t["ours"],
                "native_us": t["native"],
                "ratio": t["ours"] / t["native"],
                "bare_custom_us": t.get("custom"),
            }
        )
    found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    cpu = found.group(1).strip() if found else "cpu"
    result = {
        "device": cpu,
        "mindspore": ms.__version__,
        "numpy": np.__version__,
        "date": datetime.date.today().isoformat(),
        "elements": args.n,
        "rows": rows,
    }
    print(f"{cpu}, MindSpore {ms.__version__}, add on {args.n} fp32, time per call")
    print("| mode | opforge (µs) | ops.add (µs) | ratio | bare ops.Custom (µs) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        bare = f"{r['bare_custom_us']:.1f}" if r["bare_custom_us"] else "-"
        print(
            f"| {r['mode']} | {r['ours_us']:.1f} | {r['native_us']:.1f} | {r['ratio']:.2f}x | {bare} |"
        )
    save(result, "mindspore-overhead", cpu, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
