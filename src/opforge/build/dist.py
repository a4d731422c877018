"""What a build put in ``dist/``: the wheels recorded in the manifest, and installing them."""

from __future__ import annotations

from pathlib import Path

from opforge.build.manifest import Manifest
from opforge.errors import BuildError
from opforge.pip import pip_install
from opforge.project import Project


def dist_wheels(project: Project, profile: str) -> list[Path]:
    """The wheels the last ``build --profile PROFILE`` wrote, as recorded in the manifest."""
    manifest = Manifest(project.dist_dir / "manifest.json")
    wheels = [
        project.dist_dir / key.split(":", 1)[1]
        for profiles in manifest.targets.values()
        if profile in profiles
        for key in profiles[profile].outputs
        if key.startswith("wheel:")
    ]
    if not wheels:
        raise BuildError(
            f"no wheels recorded for profile {profile} in {manifest.path}",
            hint=f"run `opforge build --profile {profile}` first",
        )
    missing = [w for w in wheels if not w.is_file()]
    if missing:
        raise BuildError(
            f"{missing[0]} is in the manifest but not on disk",
            hint=f"run `opforge build --profile {profile}` again",
        )
    return wheels


def install_dist_wheels(project: Project, profile: str, target: Path | None = None) -> list[Path]:
    """pip-install the profile's wheels into this interpreter (or ``target``)."""
    wheels = dist_wheels(project, profile)
    pip_install(wheels, ", ".join(w.name for w in wheels), target)
    return wheels
