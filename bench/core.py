"""Core figures: `pins verify` hashing throughput on 1 GiB, and full vs no-op build wall time.

Run with `nox -s bench-core` (or `python bench/core.py`). Prints a table and writes
a new bench/results/core-<machine>-<date>[-N].json. These are measurements, not pass/fail tests.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import save

from opforge.pins.cache import CacheState, ContentCache
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.pins.model import Pin, load_pins
from opforge.settings import resolve_settings

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30


def machine() -> str:
    """CPU model and core count, e.g. 'Intel Xeon ... (2 cores)'."""
    model = platform.processor() or "cpu"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"model name\s*:\s*(.+)", cpuinfo.read_text())
        if found:
            model = found.group(1).strip()
    return f"{model} ({os.cpu_count()} cores)"


def opforge(*args: str) -> float:
    """Wall time of one `opforge ARGS` run (raises if it fails)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "opforge", *args], check=True, capture_output=True)
    return time.perf_counter() - started


def bench_hashing(workdir: Path, size: int, repeats: int) -> dict:
    """Time ContentCache.verify (what `pins verify` runs) and the whole CLI call on one file."""
    blob = workdir / "blob"
    with open(blob, "wb") as out:
        for _ in range(size // (64 << 20)):
            out.write(os.urandom(64 << 20))
    digest = hash_file(blob)["sha256"]
    cache = ContentCache(workdir / "cache")
    pin = Pin("big", ("http://127.0.0.1/unused",), digest, size=size)
    (cache.blobs / digest[:2]).mkdir(parents=True)
    blob.rename(cache.path_for(pin))
    pins_file = workdir / "pins.yaml"
    pins_file.write_text(f"pins:\n  big:\n    url: http://127.0.0.1/unused\n    sha256: {digest}\n")

    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        assert cache.verify(pin).state is CacheState.OK
        seconds.append(time.perf_counter() - started)
    cli = [
        opforge("pins", "verify", "--pins", str(pins_file), "--cache", str(cache.root))
        for _ in range(repeats)
    ]
    return {
        "bytes": size,
        "verify_s_median": statistics.median(seconds),
        "verify_GBps_median": size / statistics.median(seconds) / 1e9,
        "verify_GBps_best": size / min(seconds) / 1e9,
        "cli_wall_s_median": statistics.median(cli),
        "cli_GBps_median": size / statistics.median(cli) / 1e9,
    }


def bench_build(workdir: Path, repeats: int) -> dict:
    """Full `opforge build --profile cpu` of a fresh project copy, then no-op rebuilds."""
    project = workdir / "project"
    for name in ("kernels", "recipes", "adapters"):
        shutil.copytree(REPO / name, project / name)
    shutil.copy(REPO / "checksums.yaml", project / "checksums.yaml")
    pins = load_pins(project / "checksums.yaml")
    # The download is not part of the build figure: bring the pin into the cache first.
    Fetcher(ContentCache(resolve_settings(os.environ).cache_dir)).fetch(pins.pins["dlpack-source"])
    full = opforge("--project", str(project), "build", "kernels", "--profile", "cpu", "--quiet")
    noop = [
        opforge("--project", str(project), "build", "kernels", "--profile", "cpu", "--quiet")
        for _ in range(repeats)
    ]
    return {
        "full_build_s": full,
        "noop_build_s_median": statistics.median(noop),
        "noop_build_s_max": max(noop),
    }


def main() -> int:
    """Run both benchmarks, print the table and save the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-gib", type=float, default=1.0, help="file size for hashing")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opforge-bench-") as tmp:
        hashing = bench_hashing(Path(tmp), int(args.size_gib * GIB), args.repeats)
    with tempfile.TemporaryDirectory(prefix="opforge-bench-") as tmp:
        build = bench_build(Path(tmp), args.repeats)
    result = {
        "machine": machine(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "hashing": hashing,
        "build": build,
    }
    rows = [
        (
            "pins verify, 1 GiB: in-process sha256",
            f"{hashing['verify_GBps_median']:.2f} GB/s",
            ">= 1 GB/s",
        ),
        ("pins verify, 1 GiB: whole CLI call", f"{hashing['cli_GBps_median']:.2f} GB/s", ""),
        ("opforge build --profile cpu, full", f"{build['full_build_s']:.2f} s", ""),
        ("opforge build --profile cpu, no-op", f"{build['noop_build_s_median']:.3f} s", "< 2 s"),
    ]
    print(f"machine: {result['machine']}")
    for name, value, target in rows:
        print(f"  {name:<42} {value:>12}   {target}")
    save(result, "core", result["machine"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
