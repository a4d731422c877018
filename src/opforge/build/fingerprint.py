"""A target's input fingerprint: recipe, sources, pins, options, toolchain, code generators and
dependencies; and, when it changes, which of them did.

Two builds with the same fingerprint produce the same outputs, so a match means "up to date".
"""

from __future__ import annotations

import json
from pathlib import Path

from opforge import __version__
from opforge.build import cmake as cmake_module
from opforge.build import wheel as wheel_module
from opforge.build.cmake import cmake_value
from opforge.build.toolchain import Tool
from opforge.pins.digest import hash_bytes, hash_file
from opforge.pins.model import PinSet
from opforge.recipes.generators import generator_files
from opforge.recipes.model import OptionValue, Recipe
from opforge.recipes.paths import link_problem

# How many names one category of change lists before "(+N more)".
_NAMES_SHOWN = 3


def source_files(root: Path, patterns: tuple[str, ...]) -> list[Path]:
    """Every file matched by the recipe's source globs, sorted, without duplicates."""
    found: set[Path] = set()
    for pattern in patterns:
        found.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def installed_outputs(prefix: Path, patterns: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """sha256 of every installed output under ``prefix`` (a symlink records its target), and
    the patterns that match nothing."""
    digests: dict[str, str] = {}
    unmatched: list[str] = []
    for pattern in patterns:
        matches = sorted(p for p in prefix.glob(pattern) if p.is_file() or p.is_symlink())
        if not matches:
            unmatched.append(pattern)
        for path in matches:
            rel = path.relative_to(prefix).as_posix()
            if path.is_symlink():
                digests[rel] = "symlink:" + str(path.readlink())
            else:
                digests[rel] = hash_file(path)["sha256"]
    return digests, unmatched


def links_out_of(prefix: Path, outputs: dict[str, str]) -> list[str]:
    """The outputs (as ``installed_outputs`` gives them) that are symbolic links leading out of
    ``prefix`` (or looping), each as its path relative to ``prefix``: the recipes' own check of
    links (``link_problem``) with ``prefix`` as the root."""
    return [
        rel
        for rel, digest in outputs.items()
        if digest.startswith("symlink:") and link_problem(prefix, rel) is not None
    ]


def generator_sources(recipe: Recipe, root: Path) -> dict[str, str]:
    """sha256 of the source of each generator module the recipe names (every ``.py`` file of a
    package), as the interpreter running opforge, which the build runs them with, finds them in
    project ``root`` or the opforge package (``opforge.recipes.generators``)."""
    return {
        key: hash_file(path)["sha256"]
        for i, name in enumerate(recipe.generators)
        for key, path in generator_files(name, root, f"{recipe.path}: generators[{i}]").items()
    }


def opforge_identity() -> str:
    """opforge's version plus a digest of the code that writes build commands and packs wheels:
    a change there changes what a build produces, so it is part of the toolchain."""
    code = b"".join(Path(m.__file__).read_bytes() for m in (cmake_module, wheel_module))
    return f"{__version__}+steps.{hash_bytes(code)[:12]}"


def compute_inputs(
    recipe: Recipe,
    profile: str,
    root: Path,
    pins: PinSet,
    options: dict[str, OptionValue],
    tools: list[Tool],
    dependency_outputs: dict[str, dict[str, str]],
    image: str = "host",
) -> tuple[str, dict]:
    """The inputs of one target build, and their combined sha256. ``image``: the container
    image the build runs in, or ``host``."""
    inputs = {
        "recipe": hash_bytes(json.dumps(recipe.raw, sort_keys=True).encode()),
        "profile": profile,
        "options": {k: cmake_value(k, v) for k, v in sorted(options.items())},
        "sources": {
            p.relative_to(root).as_posix(): hash_file(p)["sha256"]
            for p in source_files(root, recipe.sources)
        },
        "generators": generator_sources(recipe, root),
        "pins": {name: pins.pins[name].sha256 for name in recipe.pins},
        # opforge itself is part of the toolchain: it writes the build commands and wheels.
        "toolchain": {"opforge": opforge_identity(), **{tool.name: tool.version for tool in tools}},
        # Same tool versions in another image are still another environment.
        "image": image,
        "depends_on": {
            name: hash_bytes(json.dumps(outputs, sort_keys=True).encode())
            for name, outputs in sorted(dependency_outputs.items())
        },
    }
    return hash_bytes(json.dumps(inputs, sort_keys=True).encode()), inputs


# Inputs the build tool (CMake + Ninja) cannot see change by itself: when one of them changed,
# the target is built in a fresh build tree, or a new compiler or generator would compile nothing.
UNTRACKED_BY_BUILD_TOOL = ("toolchain", "generators", "image")


def changed_categories(old: dict, new: dict) -> set[str]:
    """The top-level input categories whose value differs between two input records."""
    return {key for key in new.keys() | old.keys() if old.get(key) != new.get(key)}


def _names(label: str, names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = f" (+{len(names) - _NAMES_SHOWN} more)" if len(names) > _NAMES_SHOWN else ""
    return f"{label}{'s' if len(names) > 1 else ''} {shown}{more}"


def _mapping_changes(label: str, old: dict, new: dict, show_values: bool = False) -> list[str]:
    reasons: list[str] = []
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    if show_values and changed:
        reasons += [f"{label} {k} changed ({old[k]} -> {new[k]})" for k in changed]
    elif changed:
        reasons.append(_names(label, changed) + " changed")
    added = sorted(new.keys() - old.keys())
    if added:
        reasons.append(_names(label, added) + " added")
    removed = sorted(old.keys() - new.keys())
    if removed:
        reasons.append(_names(label, removed) + " removed")
    return reasons


def describe_change(old: dict, new: dict) -> str:
    """One line saying which inputs differ between a recorded build and this one."""
    reasons: list[str] = []
    if old.get("recipe") != new.get("recipe"):
        reasons.append("recipe changed")
    reasons += _mapping_changes("option", old.get("options", {}), new["options"], True)
    reasons += _mapping_changes("source", old.get("sources", {}), new["sources"])
    reasons += _mapping_changes("generator", old.get("generators", {}), new["generators"])
    reasons += _mapping_changes("pin", old.get("pins", {}), new["pins"])
    reasons += _mapping_changes("tool", old.get("toolchain", {}), new["toolchain"], True)
    if old.get("image") != new.get("image"):
        reasons.append(f"image changed ({old.get('image')} -> {new.get('image')})")
    reasons += _mapping_changes("dependency", old.get("depends_on", {}), new["depends_on"])
    return "; ".join(reasons) or "inputs recorded in another format"


def describe_output_change(old: dict[str, str], new: dict[str, str], unmatched: list[str]) -> str:
    """One line saying which recorded outputs are missing or altered."""
    reasons = []
    missing = sorted(k for k in old if k not in new)
    if missing:
        reasons.append(_names("output", missing) + " missing")
    altered = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    if altered:
        reasons.append(_names("output", altered) + " altered")
    if unmatched and not missing:
        reasons.append(_names("declared output", unmatched) + " not installed")
    added = sorted(new.keys() - old.keys())
    if added:
        reasons.append(_names("output", added) + " not in the build record")
    return "; ".join(reasons)
