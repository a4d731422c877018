"""A target's input fingerprint: recipe, sources, pins, options, toolchain and dependencies.

Two builds with the same fingerprint produce the same outputs, so a match means "up to date".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from opforge import __version__
from opforge.build.cmake import cmake_value
from opforge.build.toolchain import Tool
from opforge.pins.digest import hash_bytes, hash_file
from opforge.pins.model import PinSet
from opforge.recipes.model import OptionValue, Recipe


def source_files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    """Every file matched by the recipe's source globs, sorted, without duplicates."""
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def output_digests(prefix: Path, patterns: tuple[str, ...]) -> dict[str, str] | None:
    """sha256 of every installed output under ``prefix``; ``None`` if a pattern matches nothing."""
    digests: dict[str, str] = {}
    for pattern in patterns:
        matches = sorted(p for p in prefix.glob(pattern) if p.is_file() or p.is_symlink())
        if not matches:
            return None
        for path in matches:
            rel = path.relative_to(prefix).as_posix()
            if path.is_symlink():
                digests[rel] = "symlink:" + str(path.readlink())
            else:
                digests[rel] = hash_file(path)["sha256"]
    return digests


def compute_inputs(
    recipe: Recipe,
    profile: str,
    root: Path,
    pins: PinSet,
    options: dict[str, OptionValue],
    tools: list[Tool],
    dependency_outputs: dict[str, dict[str, str]],
) -> tuple[str, dict]:
    """The inputs of one target build, and their combined sha256."""
    inputs = {
        "recipe": hash_bytes(json.dumps(recipe.raw, sort_keys=True).encode()),
        "profile": profile,
        "options": {k: cmake_value(v) for k, v in sorted(options.items())},
        "sources": {
            p.relative_to(root).as_posix(): hash_file(p)["sha256"]
            for p in source_files(root, recipe.sources)
        },
        "pins": {name: pins.pins[name].sha256 for name in recipe.pins},
        # opforge itself is part of the toolchain: it writes the build commands and wheels.
        "toolchain": {"opforge": __version__, **{tool.name: tool.version for tool in tools}},
        # The image a containerised build runs in (the docker runner sets it): same tool versions
        # in another image are still another environment.
        "image": os.environ.get("OPFORGE_IMAGE", "host"),
        "depends_on": {
            name: hash_bytes(json.dumps(outputs, sort_keys=True).encode())
            for name, outputs in sorted(dependency_outputs.items())
        },
    }
    return hash_bytes(json.dumps(inputs, sort_keys=True).encode()), inputs
