"""A/B of kernel-library builds on one GPU: bench/gpu_new_ops.py's cases (and bench/gpu.py's
argmax cases, group `argmax`, long-row softmax cases, group `rows`, softmax-over-columns cases,
group `columns`, and batch_norm cases, group `batch_norm`) for each library
in turn, alternating over several rounds in one process, so two builds are compared on the same
card, the same clocks and the same data sizes (between separate runs a row moves by up to 5%).

Run on a CUDA machine with two or more builds of libopforge_kernels.so:
    python bench/ab_libraries.py --library base=PATH --library new=PATH [--rounds 3]
        [--only norm|gelu|binary|argmax|rows|columns|batch_norm ...] [--out DIR]
Each round times every library (the order rotating from round to round), each case checked
against torch's output as gpu_new_ops does; the table gives, per case and library, the median
time over the rounds, its spread (min-max) and % of the device-to-device copy rate. Writes a new
bench/results/ab-libraries-<device>-<date>.json; exits 1 if any library's output was off.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import gpu
import gpu_new_ops
import torch
from gpu import TOLERANCE
from results_file import save

from opforge.kernels.abi import KernelLibrary

REPO = Path(__file__).resolve().parent.parent
GROUPS = (*gpu_new_ops.GROUPS, "argmax", "rows", "columns", "batch_norm")


def named_library(text: str) -> tuple[str, Path]:
    """``NAME=PATH`` as (name, path)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, Path(path)


def within_tolerance(row: dict) -> bool:
    """Whether every output of a row matched torch's within the dtype's tolerance."""
    limit = TOLERANCE[row["dtype"]]
    return all(err == err and err <= limit for err in row["max_rel_err"].values())


def _gpu_rows(lib: KernelLibrary, group: str) -> list[dict]:
    """bench/gpu.py's argmax cases (``group`` "argmax"), long-row softmax cases ("rows"),
    softmax-over-columns cases ("columns") or batch_norm cases ("batch_norm"), as rows like gpu_new_ops' (``correct``: within
    tolerance, every index torch's)."""
    bench = gpu.Bench(lib, gpu.copy_bandwidth(1 << 28))
    if group == "argmax":
        gpu.time_argmax(bench, gpu.ARGMAX_ISSUE_CASES + gpu.ARGMAX_GOOD_CASES)
    elif group == "rows":
        gpu.time_softmax_rows(bench, gpu.SOFTMAX_ROW_ISSUE_CASES)
    elif group == "batch_norm":
        gpu.time_batch_norm(
            bench,
            gpu.BATCH_NORM_ISSUE_CASES + gpu.BATCH_NORM_GOOD_CASES + gpu.BATCH_NORM_MORE_CASES,
        )
    else:
        gpu.time_softmax_columns(
            bench, gpu.SOFTMAX_COLUMN_ISSUE_CASES + gpu.SOFTMAX_COLUMN_MORE_CASES
        )
    return [
        {
            "op": r["case"],
            "size": r["size"],
            "dtype": r["dtype"],
            "floor_ms": r["bytes"] / (bench.copy_bw * 1e9),
            "ours_ms": r["ours_ms"],
            "correct": r["correct"],
        }
        for r in bench.rows
    ]


def run_groups(lib: KernelLibrary, groups: tuple[str, ...]) -> list[dict]:
    """One library's rows for ``groups``, each with ``correct`` set."""
    new_ops = tuple(g for g in groups if g in gpu_new_ops.GROUPS)
    rows = []
    if new_ops:
        rows += [
            {**r, "correct": within_tolerance(r)}
            for r in gpu_new_ops.run(lib, False, new_ops)["rows"]
        ]
    for group in ("argmax", "rows", "columns", "batch_norm"):
        if group in groups:
            rows += _gpu_rows(lib, group)
    return rows


def summarise(runs: list[dict]) -> list[dict]:
    """One entry per (case, library): median, min and max of ours_ms over the rounds."""
    cases: dict[tuple, dict] = {}
    for run in runs:
        for row in run["rows"]:
            key = (row["op"], row["size"], row["dtype"], run["library"])
            entry = cases.setdefault(
                key,
                {
                    "op": row["op"],
                    "size": row["size"],
                    "dtype": row["dtype"],
                    "library": run["library"],
                    "floor_ms": row["floor_ms"],
                    "ours_ms": [],
                },
            )
            entry["ours_ms"].append(row["ours_ms"])
    for entry in cases.values():
        times = entry.pop("ours_ms")
        entry["median_ms"] = statistics.median(times)
        entry["min_ms"], entry["max_ms"] = min(times), max(times)
        entry["pct_copy"] = 100 * entry["floor_ms"] / entry["median_ms"]
    return list(cases.values())


def table(summary: list[dict], names: list[str]) -> str:
    """The summary as a markdown table, one line per case, libraries side by side."""
    head = "| case | dtype | " + " | ".join(f"{n} ms (min-max) | {n} % of copy" for n in names)
    lines = [head + " |", "| --- | --- |" + " ---: | ---: |" * len(names)]
    by_case: dict[tuple, dict] = {}
    for e in summary:
        by_case.setdefault((e["op"], e["size"], e["dtype"]), {})[e["library"]] = e
    for (op, size, dtype), libs in by_case.items():
        cells = []
        for n in names:
            e = libs[n]
            cells.append(
                f"{e['median_ms']:.4f} ({e['min_ms']:.4f}-{e['max_ms']:.4f}) | {e['pct_copy']:.1f}%"
            )
        lines.append(f"| {op} {size} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    """Time the libraries in alternation, print the table, save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--library",
        type=named_library,
        action="append",
        required=True,
        help="NAME=PATH of a libopforge_kernels.so; give two or more",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every library")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=GROUPS,
        default=["norm"],
        help="groups of cases to time: gpu_new_ops' groups, argmax, columns or batch_norm "
        "(default: norm)",
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    names = [name for name, _ in args.library]
    if len(set(names)) != len(names) or len(names) < 2:
        parser.error("give two or more libraries with distinct names")
    libraries = {}
    for name, path in args.library:
        library = gpu.library_on_device("ab_libraries.py", path)
        if library is None:
            return 2
        libraries[name] = library
    runs = []
    for number in range(args.rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            print(f"round {number + 1}, {name}:", flush=True)
            rows = run_groups(libraries[name], tuple(args.only))
            runs.append({"round": number + 1, "library": name, "rows": rows})
    summary = summarise(runs)
    props = torch.cuda.get_device_properties(0)
    document = {
        "device": props.name,
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "libraries": {name: str(path) for name, path in args.library},
        "summary": summary,
        "runs": runs,
    }
    print(f"{props.name}, {args.rounds} rounds, median (min-max) of ours per library")
    print(table(summary, names))
    save(document, "ab-libraries", props.name, Path(args.out))
    wrong = [
        f"{run['library']}: {row['op']} {row['size']} {row['dtype']}"
        for run in runs
        for row in run["rows"]
        if not row["correct"]
    ]
    for line in wrong:
        print(f"output off against torch: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
