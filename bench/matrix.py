"""Figures of nightly-matrix cells on this machine: image build time (first build, and again from
Docker's layer cache), image sizes, devel build time, tests passed; the GPU libraries each cell
built are copied out for a GPU machine.

    python bench/matrix.py CELL... [--reports DIR] [--artifacts DIR] [--remove]

Each cell runs with `opforge ci run-cell` (a passed cell record already in --reports is reused).
"Cached" rebuilds an image whose layers are all in the cache: its tag is moved aside and
`opforge images build` runs again (context assembly, upload to the engine, every step cached).
--remove then removes the images the cells' runs created (their cell records list them).
Saves bench/results/matrix-cells-<cpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from results_file import save

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from opforge.ci.cell import RECORD, image_flags  # noqa: E402
from opforge.ci.matrix import load_matrix  # noqa: E402
from opforge.dockerengine import docker_client  # noqa: E402
from opforge.images.build import remove_built  # noqa: E402

OPFORGE = [sys.executable, "-m", "opforge"]


def run_cell(cell_id: str, reports: Path) -> dict:
    """The cell's cell record, running the cell unless a passed record exists."""
    path = reports / cell_id / RECORD
    if path.is_file() and json.loads(path.read_text()).get("status") == "passed":
        return json.loads(path.read_text())
    log = reports / f"{cell_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        argv = [*OPFORGE, "ci", "run-cell", cell_id, "--junit-dir", str(reports)]
        subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return json.loads(path.read_text())


def cached_rebuild(client, tag: str, kind: str, flags: list[str]) -> float:
    """Seconds to rebuild ``tag`` with every layer in the cache."""
    aside = f"opforge-bench-aside:{kind}"
    client.images.get(tag).tag(aside)
    client.images.remove(tag)  # only the tag: the aside tag keeps every layer
    started = time.monotonic()
    subprocess.run(
        [*OPFORGE, "images", "build", "--kind", kind, *flags],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    seconds = time.monotonic() - started
    client.images.remove(aside)
    return seconds


def copy_artifacts(dest: Path) -> list[str]:
    """The cell's GPU libraries in dist/gpu's layout under ``dest``: the kernel library with its
    soname links, and the MindSpore package with its CUDA AOT library (its copy of the kernel
    library is a link to the one in lib/, which is the same file)."""
    dist = REPO / "dist" / "gpu"
    copied = []
    for source in sorted(dist.glob("lib/libopforge_kernels.so*")) + sorted(
        p for p in dist.glob("python/opforge/mindspore/*") if p.name != "_aot_cpu.so"
    ):
        target = dest / source.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.name == "libopforge_kernels.so.0":
            target.symlink_to("../../../lib/libopforge_kernels.so.0")
        elif source.is_file():
            shutil.copy2(source, target)
        copied.append(str(source.relative_to(REPO)))
    return copied


def main() -> int:
    """Run, measure, print, save."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cells", nargs="+", metavar="CELL")
    parser.add_argument("--reports", default=str(REPO / "build" / "bench-matrix"))
    parser.add_argument("--artifacts", help="copy each cell's GPU libraries to DIR/<cell>/")
    parser.add_argument("--remove", action="store_true", help="remove the images the runs made")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    reports = Path(args.reports).resolve()
    matrix = load_matrix(REPO / "ci" / "matrix.yaml", REPO / "images" / "versions.yaml")
    client = docker_client()
    figures: dict = {"cells": {}}
    for cell_id in args.cells:
        cell = matrix.cell(cell_id)
        record = run_cell(cell_id, reports)
        row = {
            "status": record["status"],
            "error": record.get("error"),
            "first_build_s": {k: v for k, v in record["seconds"].items() if k.startswith("image")},
            "devel_build_s": record["seconds"].get("build"),
            "tests_s": record["seconds"].get("tests"),
            "tests": record.get("tests"),
            "skipped": record.get("skipped"),
            "images": {
                k: {"tag": v["tag"], "size_bytes": v["size"]}
                for k, v in record.get("images", {}).items()
            },
        }
        if record["status"] == "passed":
            row["cached_build_s"] = {
                f"image_{kind}": round(
                    cached_rebuild(client, record["images"][kind]["tag"], kind, image_flags(cell)),
                    1,
                )
                for kind in ("devel", "runtime")
            }
            if args.artifacts:
                row["artifacts"] = copy_artifacts(Path(args.artifacts) / cell_id)
        figures["cells"][cell_id] = row
        print(json.dumps({cell_id: row}, indent=2), flush=True)
        if args.remove:
            images = record.get("images", {})
            remove_built(
                client,
                [v["tag"] for v in images.values() if v.get("created")],
                [layer for v in images.values() for layer in v.get("created", [])],
            )
    found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    cpu = f"{found.group(1).strip() if found else 'cpu'} ({os.cpu_count()} cores)"
    figures = {"machine": cpu, "date": datetime.date.today().isoformat(), **figures}
    save(figures, "matrix-cells", cpu, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
