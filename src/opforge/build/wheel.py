"""Packaging installed files as a wheel (PyPA's ``wheel`` writes the RECORD)."""

from __future__ import annotations

import os
import re
import sysconfig
import tempfile
from pathlib import Path

from wheel.wheelfile import WheelFile

from opforge.errors import BuildError


def platform_tag() -> str:
    """This machine's wheel platform tag, e.g. ``linux_x86_64``."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def build_wheel(root: Path, name: str, version: str, requires: list[str], dest: Path) -> Path:
    """Write ``dest/<name>-<version>-py3-none-<platform>.whl`` holding every file under ``root``.

    The package has compiled code but no Python C-API dependency (the ops are loaded through
    ``torch.ops.load_library``), hence ``py3-none`` with a platform tag.
    """
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise BuildError(f"wheel {name}: nothing to package under {root}")
    dist = re.sub(r"[-_.]+", "_", name)
    tag = f"py3-none-{platform_tag()}"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
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
