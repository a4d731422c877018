"""Cold and warm times of the devel/runtime image builds and of a GPU-profile build in devel,
plus the image sizes. `python bench/images.py [--cold]`; --cold first removes opforge's images
and the engine's build cache (the base image stays). Saves bench/results/images-<cpu>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import save

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: Path) -> float:
    """Seconds ``argv`` took; exits with its output if it fails."""
    started = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return time.monotonic() - started


def image_size(tag: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", tag], capture_output=True, text=True
    )
    return int(out.stdout.strip())


def main() -> int:
    """Measure, print, save."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true", help="remove images and build cache first")
    parser.add_argument(
        "--base-image", default=os.environ.get("BASE_IMAGE", "opforge-base:bookworm")
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    opforge = [sys.executable, "-m", "opforge"]
    base = ["--base-image", args.base_image]
    if args.cold:
        tags = subprocess.run(
            ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "opforge/*"],
            capture_output=True,
            text=True,
        ).stdout.split()
        if tags:
            subprocess.run(["docker", "rmi", "-f", *tags], capture_output=True)
        subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True)
    figures: dict[str, float | int | str] = {}
    for kind in ("devel", "runtime"):
        figures[f"{kind}_image_first_s"] = timed(
            [*opforge, "images", "build", "--kind", kind, *base], REPO
        )
        figures[f"{kind}_image_again_s"] = timed(
            [*opforge, "images", "build", "--kind", kind, *base], REPO
        )
    with tempfile.TemporaryDirectory() as scratch:
        project = Path(scratch)
        for name in ("kernels", "recipes", "adapters", "images", "src"):
            shutil.copytree(REPO / name, project / name)
        shutil.copy(REPO / "checksums.yaml", project)
        build = [
            *opforge,
            "build",
            "kernels",
            "mindspore-adapter",
            "--profile",
            "gpu",
            "--runner",
            "docker",
            "--quiet",
            *base,
        ]
        figures["build_gpu_in_devel_first_s"] = timed(build, project)
        figures["build_gpu_in_devel_again_s"] = timed(build, project)
    for kind in ("devel", "runtime"):
        tag = (
            subprocess.run(
                [*opforge, "images", "build", "--kind", kind, *base], capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        figures[f"{kind}_tag"] = tag
        figures[f"{kind}_size_bytes"] = image_size(tag)
    found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    cpu = f"{found.group(1).strip() if found else 'cpu'} ({os.cpu_count()} cores)"
    result = {
        "machine": cpu,
        "date": datetime.date.today().isoformat(),
        "cold": args.cold,
        **figures,
    }
    for key, value in figures.items():
        shown = (
            f"{value / 1e9:.2f} GB"
            if key.endswith("bytes")
            else (f"{value:.1f} s" if isinstance(value, float) else value)
        )
        print(f"{key:32} {shown}")
    save(result, "images-cold" if args.cold else "images-warm", cpu, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
