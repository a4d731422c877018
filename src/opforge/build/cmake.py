"""The steps of a ``cmake`` recipe: configure with Ninja, build, install into the prefix."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from opforge.build.steps import Step
from opforge.build.toolchain import Tool
from opforge.errors import BuildError
from opforge.recipes.model import OptionValue, Recipe
from opforge.recipes.options import RESERVED_PREFIX, value_problem


def pin_variable(pin_name: str) -> str:
    """The CMake cache variable through which a pinned file's cached path reaches a build."""
    return RESERVED_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", pin_name).upper()


def cmake_value(name: str, value: OptionValue) -> str:
    """Option ``name``'s value as CMake reads it (booleans become ON/OFF); ``BuildError`` for one
    CMakeCache.txt cannot hold (recipe validation refuses those first)."""
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    problem = value_problem(value)
    if problem is not None:
        raise BuildError(
            f"CMake option {name}: {problem}",
            hint="write the value on one line, without control characters",
        )
    return str(value)


def cmake_steps(
    recipe: Recipe,
    *,
    root: Path,
    build_dir: Path,
    prefix: Path,
    options: dict[str, OptionValue],
    pin_paths: dict[str, Path],
    tools: dict[str, Tool],
    jobs: int,
) -> list[Step]:
    """Configure, build and install steps for ``recipe``."""
    cmake = str(tools["cmake"].path)
    own = {
        "CMAKE_INSTALL_PREFIX": str(prefix),
        "CMAKE_PREFIX_PATH": str(prefix),
        "CMAKE_MAKE_PROGRAM": str(tools["ninja"].path),
        "CMAKE_CXX_COMPILER": str(tools["c++"].path),
        # The interpreter running opforge: find modules ask it where pip put CUDA libraries.
        "Python3_EXECUTABLE": sys.executable,
        **{pin_variable(name): str(path) for name, path in pin_paths.items()},
    }
    # Validation refuses recipe options naming these (opforge.recipes.options.RESERVED_DEFINES);
    # should one get here anyway, opforge's own value still wins.
    defines = {**options, **own}
    if "nvcc" in tools:
        defines["CMAKE_CUDA_COMPILER"] = str(tools["nvcc"].path)
    configure = (
        cmake,
        "-S",
        str(root / recipe.cmake.source_dir),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
    )
    return [
        Step(
            "configure",
            configure + tuple(f"-D{k}={cmake_value(k, v)}" for k, v in defines.items()),
            root,
        ),
        Step("build", (cmake, "--build", str(build_dir), "--parallel", str(jobs)), root),
        # CMake's install skips a file whose time is within a second of the installed copy's:
        # a rebuild that soon after the last one would leave the old output in place.
        Step(
            "install",
            (cmake, "--install", str(build_dir)),
            root,
            env={"CMAKE_INSTALL_ALWAYS": "1"},
        ),
    ]
