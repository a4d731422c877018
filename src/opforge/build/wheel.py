"""Packaging a target's declared outputs as a wheel (PyPA's ``wheel`` writes the RECORD)."""

from __future__ import annotations

import os
import re
import sysconfig
import tempfile
from collections.abc import Iterable
from pathlib import Path

from opforge.errors import BuildError
from opforge.requirements import one_line, requirement_problem


def platform_tag() -> str:
    """This machine's wheel platform tag, e.g. ``linux_x86_64``."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def _header(field: str, value: str) -> str:
    if not one_line(value):
        raise BuildError(
            f"wheel METADATA {field}: {value!r} contains a line break or control character",
            hint="fix the recipe's wheel section (one line per value)",
        )
    return f"{field}: {value}"


def wheel_files(prefix: Path, root: str, outputs: Iterable[str]) -> list[Path]:
    """The files a target's wheel carries: its declared outputs (paths relative to ``prefix``)
    that lie under ``prefix/root``. Other targets installing into the same prefix (both adapters
    share ``python/opforge/``) never leak into this wheel."""
    base = prefix / root
    return [
        prefix / output
        for output in sorted(outputs)
        if (prefix / output).is_relative_to(base) and (prefix / output).is_file()
    ]


def build_wheel(
    root: Path, files: list[Path], name: str, version: str, requires: list[str], dest: Path
) -> Path:
    """Write ``dest/<name>-<version>-py3-none-<platform>.whl`` holding ``files``, each at its
    path relative to ``root``.

    The package has compiled code but no Python C-API dependency (the ops are loaded through
    ``torch.ops.load_library``), hence ``py3-none`` with a platform tag.
    """
    try:
        from wheel.wheelfile import WheelFile
    except ImportError:
        raise BuildError(
            f"wheel {name}: the python package `wheel` is not installed",
            hint="pip install 'opforge[build]' (or pip install wheel)",
        ) from None
    if not files:
        raise BuildError(
            f"wheel {name}: no declared output under {root} to package",
            hint="the recipe's outputs must include files under its wheel.root",
        )
    for requirement in requires:
        problem = requirement_problem(requirement)
        if problem:
            raise BuildError(
                f"wheel {name}: requirement {requirement!r} {problem}",
                hint="wheel.requires takes PEP 508 requirements, one per entry",
            )
    dist = re.sub(r"[-_.]+", "_", name)
    tag = f"py3-none-{platform_tag()}"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        _header("Name", name),
        _header("Version", version),
        *(_header("Requires-Dist", r) for r in requires),
    ]
    wheel_meta = [
        "Wheel-Version: 1.0",
        "Generator: opforge",
        "Root-Is-Purelib: false",
        f"Tag: {tag}",
    ]
    # Written in a scratch dir beside dest, then renamed: dest never holds a half-written wheel.
    with tempfile.TemporaryDirectory(dir=dest, prefix=".wheel-") as scratch:
        temp = Path(scratch) / path.name
        with WheelFile(temp, "w") as wheel:
            for file in files:
                wheel.write(str(file), arcname=file.relative_to(root).as_posix())
            wheel.writestr(f"{info}/METADATA", "\n".join(metadata) + "\n")
            wheel.writestr(f"{info}/WHEEL", "\n".join(wheel_meta) + "\n")
        os.replace(temp, path)
    return path
