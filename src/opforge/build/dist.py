"""What a build put in ``dist/``: the wheels the build record names, and installing them."""

from __future__ import annotations

from pathlib import Path

from opforge.build.record import BuildRecord, recorded_wheels
from opforge.errors import BuildError, OpforgeError
from opforge.pins.digest import hash_file
from opforge.pip import pip_install
from opforge.project import Project


def _no_wheel(project: Project, profile: str, name: str, recorded: list[str]) -> BuildError:
    """Why target ``name`` has no ``profile`` wheel to install, with the fix: it is no target, it
    builds no wheel, it has no such profile, or it was not built yet. ``recorded``: the targets
    whose ``profile`` wheels the build record names."""
    have = f"targets with {profile} wheels: {', '.join(recorded) or '(none)'}"
    try:
        recipes = project.load_recipes(project.load_pins()).recipes
    except OpforgeError:
        # Recipes that do not load cannot say more; the build record's view still helps.
        recipes = None
    recipe = recipes.get(name) if recipes is not None else None
    if recipes is not None and recipe is None:
        return BuildError(
            f"unknown target {name!r}",
            hint=f"{have}; known targets: {', '.join(sorted(recipes)) or '(none)'}",
        )
    if recipe is not None and recipe.wheel is None:
        makers = sorted(n for n, r in recipes.items() if r.wheel is not None)
        return BuildError(
            f"target {name} builds no wheel ({recipe.path} has no wheel section); its outputs "
            f"are installed in {project.dist_dir / profile}",
            hint=f"targets that build wheels: {', '.join(makers) or '(none)'}; {have}",
        )
    if recipe is not None and profile not in recipe.profiles:
        return BuildError(
            f"target {name} has no {profile} profile ({recipe.path})",
            hint=f"install its wheel with --profile {' or '.join(recipe.profiles)}",
        )
    return BuildError(
        f"no {profile} wheel recorded for target {name!r} in {project.build_record}",
        hint=f"{have}; build one with `opforge build {name} --profile {profile}`",
    )


def dist_wheels(
    project: Project, profile: str, targets: list[str] | None = None, *, none_ok: bool = False
) -> list[Path]:
    """The wheels the last ``build --profile PROFILE`` wrote, as the build record names them: every
    target's, or those of ``targets`` (each must have built a wheel). Each must still be the file
    the build wrote (its sha256 as recorded). With ``none_ok``, a profile that built no wheel
    gives none rather than an error."""
    if project.dist_dir.exists() and not project.dist_dir.is_dir():
        raise BuildError(
            f"{project.dist_dir} is not a directory, so it holds no build outputs",
            hint=f"move it away and run `opforge build --profile {profile}`",
        )
    record = BuildRecord(project.build_record)
    if record.problem is not None:
        raise BuildError(
            f"the build record {record.path} cannot be used: {record.problem}",
            hint=f"run `opforge build --profile {profile}`, which writes it anew",
        )
    built = {
        name: recorded_wheels(profiles[profile].outputs, record.path)
        for name, profiles in sorted(record.targets.items())
        if profile in profiles
    }
    with_wheels = [name for name, wheels in built.items() if wheels]
    for name in targets or []:
        if not built.get(name):
            raise _no_wheel(project, profile, name, with_wheels)
    wheels = []
    for name in targets or with_wheels:
        for wheel, digest in built[name].items():
            path = project.dist_dir / wheel
            rebuild = f"rebuild it: `opforge build {name} --profile {profile}`"
            if path.is_symlink():
                # The build writes wheels as files: a link may lead anywhere, out of dist/ too.
                raise BuildError(
                    f"{path} is a link, not the wheel file the build wrote",
                    hint=f"remove it and {rebuild}",
                )
            if path.exists() and not path.is_file():
                raise BuildError(
                    f"{path} is in the build record but is not a file",
                    hint=f"remove it and {rebuild}",
                )
            if not path.is_file():
                raise BuildError(f"{path} is in the build record but not on disk", hint=rebuild)
            if hash_file(path)["sha256"] != digest:
                raise BuildError(
                    f"{path} is not the wheel target {name}'s {profile} build wrote (its sha256 "
                    f"differs from the one in {record.path}: changed or corrupt since)",
                    hint=rebuild,
                )
            wheels.append(path)
    if not wheels and not none_ok:
        raise BuildError(
            f"no wheels recorded for profile {profile} in {record.path}",
            hint=f"run `opforge build --profile {profile}` first",
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
