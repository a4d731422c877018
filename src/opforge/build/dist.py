"""What a build put in ``dist/``: the wheels the build record names, and installing them."""

from __future__ import annotations

from pathlib import Path

from opforge.build.record import BuildRecord
from opforge.errors import BuildError
from opforge.pip import pip_install
from opforge.project import Project


def _wheel_names(outputs: dict[str, str]) -> list[str]:
    return [key.split(":", 1)[1] for key in outputs if key.startswith("wheel:")]


def dist_wheels(project: Project, profile: str, targets: list[str] | None = None) -> list[Path]:
    """The wheels the last ``build --profile PROFILE`` wrote, as the build record names them: every
    target's, or those of ``targets`` (each must have built a wheel)."""
    record = BuildRecord(project.build_record)
    built = {
        name: _wheel_names(profiles[profile].outputs)
        for name, profiles in sorted(record.targets.items())
        if profile in profiles
    }
    with_wheels = [name for name, names in built.items() if names]
    for name in targets or []:
        if not built.get(name):
            raise BuildError(
                f"no {profile} wheel recorded for target {name!r} in {record.path}",
                hint=f"targets with {profile} wheels: {', '.join(with_wheels) or '(none)'}; "
                f"build one with `opforge build {name} --profile {profile}`",
            )
    wheels = [
        project.dist_dir / wheel for name in (targets or with_wheels) for wheel in built[name]
    ]
    if not wheels:
        raise BuildError(
            f"no wheels recorded for profile {profile} in {record.path}",
            hint=f"run `opforge build --profile {profile}` first",
        )
    missing = [w for w in wheels if not w.is_file()]
    if missing:
        raise BuildError(
            f"{missing[0]} is in the build record but not on disk",
            hint=f"run `opforge build --profile {profile}` again",
        )
    return wheels


def install_dist_wheels(
    project: Project, profile: str, targets: list[str] | None = None, dest: Path | None = None
) -> list[Path]:
    """pip-install the wheels of the profile (of ``targets`` only, when given) into this
    interpreter (or the directory ``dest``)."""
    wheels = dist_wheels(project, profile, targets)
    pip_install(wheels, ", ".join(w.name for w in wheels), dest)
    return wheels
