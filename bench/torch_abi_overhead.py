"""Per-call time of the stable-ABI PyTorch adapter against the version-pinned one it replaced,
and against torch's own ops, on small tensors (the fixed cost of a call).

The pinned adapter (C++ autograd, built against one exact torch) is the last commit before the
op table, built in a directory of its own:

    git archive f533987 | tar -x -C /tmp/pinned
    PYTHONPATH=/tmp/pinned/src python -m opforge --project /tmp/pinned build torch-adapter

    python bench/torch_abi_overhead.py --pinned /tmp/pinned/dist/cpu/python/opforge/torch

Each variant runs in its own process (both register the ``opforge`` namespace), in alternating
rounds, so drift of a shared machine falls on both; the medians over rounds are reported and
saved under bench/results/torch-abi-overhead-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CALLS = [
    ("add, 1 element (fixed cost)", "m.add(one, one)", "torch.add(one, one)"),
    ("add, 4096", "m.add(a, b)", "torch.add(a, b)"),
    ("softmax, 8x512", "m.softmax(x, -1)", "torch.softmax(x, -1)"),
    ("argmax, 8x512", "m.argmax(x, -1)", "torch.argmax(x, -1)"),
]


def child(variant: str, pinned: str | None, device: str) -> None:
    """Time every call of one variant; print a JSON line."""
    import torch
    from torch.utils import benchmark

    if variant == "pinned":
        spec = importlib.util.spec_from_file_location(
            "opforge_pinned_torch",
            Path(pinned) / "__init__.py",
            submodule_search_locations=[pinned],
        )
        m = importlib.util.module_from_spec(spec)
        sys.modules["opforge_pinned_torch"] = m
        spec.loader.exec_module(m)
    else:
        import opforge.torch as m
    torch.manual_seed(0)
    env = {
        "torch": torch,
        "m": m,
        "one": torch.randn(1, device=device),
        "a": torch.randn(4096, device=device),
        "b": torch.randn(4096, device=device),
        "x": torch.randn(8, 512, device=device),
    }
    times = {}
    for name, ours, native in CALLS:
        for key, stmt in (("ours", ours), ("torch", native)):
            timer = benchmark.Timer(stmt=stmt, globals=env, num_threads=1)
            timer.timeit(2000)  # warm-up: lazy set-up stays out of the first row's figure
            times[f"{name}|{key}"] = timer.blocked_autorange(min_run_time=0.5).median * 1e6
    print(json.dumps(times))


def main() -> int:
    """Alternate the two variants over rounds; print and save the medians."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pinned", required=True, help="the pinned adapter's opforge/torch directory"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--child", choices=["stable", "pinned"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pinned, args.device)
        return 0
    samples: dict[str, dict[str, list[float]]] = {"stable": {}, "pinned": {}}
    for _ in range(args.rounds):
        for variant in ("stable", "pinned"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    variant,
                    "--pinned",
                    args.pinned,
                    "--device",
                    args.device,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                samples[variant].setdefault(key, []).append(value)
    import torch

    if args.device == "cuda":
        device = torch.cuda.get_device_name(0)
    else:
        found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        device = f"{found.group(1).strip() if found else platform.processor()} (1 thread)"
    rows = []
    for name, _, _ in CALLS:
        row = {"call": name}
        for variant in ("stable", "pinned"):
            ours = statistics.median(samples[variant][f"{name}|ours"])
            native = statistics.median(samples[variant][f"{name}|torch"])
            row[variant] = {
                "ours_us": ours,
                "torch_us": native,
                "extra_us": ours - native,
                "ratio": ours / native,
            }
        rows.append(row)
    print(
        f"{device}, torch {torch.__version__}, medians of {args.rounds} alternating rounds (µs per call)"
    )
    print("| call | stable | pinned | torch | stable - torch | pinned - torch | stable / torch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        s, p = r["stable"], r["pinned"]
        print(
            f"| {r['call']} | {s['ours_us']:.2f} | {p['ours_us']:.2f} | {s['torch_us']:.2f} | "
            f"{s['extra_us']:+.2f} | {p['extra_us']:+.2f} | {s['ratio']:.2f}x |"
        )
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_file import save

    result = {"device": device, "torch": torch.__version__, "rounds": args.rounds, "rows": rows}
    save(result, f"torch-abi-overhead-{args.device}", device, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
