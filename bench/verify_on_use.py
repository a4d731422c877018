"""What verifying pinned files on every use costs: no-op builds, and one cached pin's check.

A no-op `opforge build --profile cpu` (every target up to date) uses no pinned file, so it hashes
none; a rebuild re-verifies each pin it uses. Run `python bench/verify_on_use.py`; prints a table
and writes bench/results/verify-on-use-<machine>-<date>.json. Measurements, not pass/fail tests.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from core import REPO, machine, opforge
from results_file import save

from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher
from opforge.pins.model import load_pins
from opforge.settings import resolve_settings


def bench_noop_build(workdir: Path, repeats: int) -> dict:
    """A full CPU build of a project copy (all targets), then no-op rebuilds."""
    project = workdir / "project"
    for name in ("kernels", "recipes", "adapters"):
        shutil.copytree(REPO / name, project / name)
    shutil.copy(REPO / "checksums.yaml", project / "checksums.yaml")
    build = ("--project", str(project), "build", "--profile", "cpu", "--quiet")
    full = opforge(*build)
    noop = [opforge(*build) for _ in range(repeats)]
    return {
        "full_build_s": full,
        "noop_build_s_median": statistics.median(noop),
        "noop_build_s_max": max(noop),
    }


def bench_pin_check(repeats: int) -> dict:
    """Wall time of Fetcher.fetch on a cached pin (type, size and sha256 checked) per pin."""
    pins = load_pins(REPO / "checksums.yaml").pins
    cache = ContentCache(resolve_settings(os.environ).cache_dir)
    fetcher = Fetcher(cache, offline=True)
    figures = {}
    for name, pin in pins.items():
        if not cache.has(pin):
            continue
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            fetcher.fetch(pin)
            seconds.append(time.perf_counter() - started)
        figures[name] = {
            "bytes": pin.size,
            "check_s_median": statistics.median(seconds),
            "GBps": (pin.size or 0) / statistics.median(seconds) / 1e9,
        }
    return figures


def main() -> int:
    """Run both measurements, print the table and save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opforge-bench-") as tmp:
        build = bench_noop_build(Path(tmp), args.repeats)
    checks = bench_pin_check(args.repeats)
    result = {
        "machine": machine(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "build_cpu_all_targets": build,
        "cached_pin_check": checks,
    }
    print(f"machine: {result['machine']}")
    print(f"  {'opforge build --profile cpu, full':<46} {build['full_build_s']:>9.2f} s")
    print(
        f"  {'opforge build --profile cpu, no-op (median)':<46} "
        f"{build['noop_build_s_median']:>9.3f} s   target < 2 s"
    )
    for name, figure in checks.items():
        label = f"check cached {name} ({figure['bytes']} B)"
        print(f"  {label:<46} {figure['check_s_median'] * 1e3:>9.1f} ms")
    save(result, "verify-on-use", result["machine"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
