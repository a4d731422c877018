"""One matrix cell, run locally with exactly the commands the nightly workflow runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from opforge.ci.matrix import Cell
from opforge.errors import BuildError


def cell_commands(cell: Cell, junit_dir: Path) -> list[list[str]]:
    """The opforge commands of a cell: images, build in devel (gpu), tests in runtime."""
    image = [
        "--flavour",
        cell.flavour,
        "--cuda",
        cell.cuda,
        "--cudnn",
        cell.cudnn,
        "--framework",
        cell.framework,
    ]
    return [
        ["opforge", "images", "build", "--kind", "devel", *image],
        ["opforge", "images", "build", "--kind", "runtime", *image],
        ["opforge", "build", *cell.targets, "--profile", "gpu", "--runner", "docker", *image],
        [
            "opforge",
            "test",
            *cell.targets,
            "--profile",
            "gpu",
            "--runner",
            "docker",
            *image,
            "--junit-dir",
            str(junit_dir / cell.id),
        ],
    ]


def image_cache_commands(cache: Path, save: bool) -> list[list[str]]:
    """docker load (before) / save (after) of opforge's images, for the CI cache step."""
    archive = str(cache / "opforge-images.tar")
    if not save:
        return [["sh", "-c", f'[ ! -f "{archive}" ] || docker load -i "{archive}"']]
    return [
        [
            "sh",
            "-c",
            f'mkdir -p "{cache}" && docker save -o "{archive}" $(docker images -q "opforge/*" | sort -u)',
        ]
    ]


def run_cell(cell: Cell, junit_dir: Path, image_cache: Path | None, dry_run: bool = False) -> None:
    """Run (or, dry, print) the cell's commands in order; stop at the first failure."""
    commands = cell_commands(cell, junit_dir)
    if image_cache is not None:
        commands = [
            *image_cache_commands(image_cache, False),
            *commands,
            *image_cache_commands(image_cache, True),
        ]
    for argv in commands:
        print("$ " + " ".join(argv), flush=True)
        if dry_run:
            continue
        real = [sys.executable, "-m", "opforge", *argv[1:]] if argv[0] == "opforge" else argv
        code = subprocess.run(real).returncode
        if code != 0:
            raise BuildError(f"cell {cell.id}: `{' '.join(argv)}` failed (exit {code})")
