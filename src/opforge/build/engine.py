"""Building targets in dependency order, skipping those whose inputs did not change."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from opforge import __version__
from opforge.atomic import require_inside
from opforge.build.cmake import cmake_steps
from opforge.build.fingerprint import (
    UNTRACKED_BY_BUILD_TOOL,
    changed_categories,
    compute_inputs,
    describe_change,
    describe_output_change,
    installed_outputs,
    links_out_of,
)
from opforge.build.record import WHEEL_KEY, BuildRecord, TargetRecord, recorded_wheels
from opforge.build.steps import Runner
from opforge.build.toolchain import Tool, require_python_package, require_tool
from opforge.build.wheel import build_wheel, wheel_files
from opforge.dirs import BUILD_DIR_HINT, make_dirs
from opforge.errors import BuildError, ConfigError, RecipeError, ToolMissing
from opforge.locks import hold_locks
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.pins.model import PinSet
from opforge.project import Project
from opforge.recipes.loader import is_bare_name
from opforge.recipes.model import Recipe

_BASE_TOOLS = ("cmake", "ninja", "c++")


@dataclass(frozen=True)
class TargetResult:
    """What happened to one target: ``built``, ``up-to-date`` or ``skipped`` (and why)."""

    name: str
    status: str
    detail: str = ""
    duration_s: float = 0.0


def _cmake_cache_paths(cache: Path, *names: str) -> list[Path | None]:
    """The paths CMake recorded as ``names`` in ``cache`` (CMakeCache.txt), None for each
    missing, in one read. As bytes: CMake writes the path's own bytes, which need not be
    UTF-8."""
    try:
        data = cache.read_bytes() if cache.is_file() else b""
    except OSError:
        data = b""  # configure reads it, and says what is wrong
    found: dict[bytes, Path] = {}
    for line in data.splitlines():
        key, _, value = line.partition(b"=")
        found.setdefault(key.partition(b":")[0], Path(os.fsdecode(value.rstrip(b"\r"))))
    return [found.get(name.encode()) for name in names]


def _require_own_tree(build_dir: Path, source: Path) -> None:
    """``ConfigError`` for a build tree CMake configured from another source folder in this
    place (one OPFORGE_BUILD_DIR for two checkouts): CMake refuses it, and the failed
    configure's cleanup would then remove the other checkout's cache, each build breaking the
    other's. A tree CMake configured elsewhere (a checkout copied or moved with its build/)
    loses its cache instead, and configures afresh."""
    cache = build_dir / "CMakeCache.txt"
    home, made_in = _cmake_cache_paths(cache, "CMAKE_HOME_DIRECTORY", "CMAKE_CACHEFILE_DIR")
    if home is None or home.resolve() == source.resolve():
        return
    if made_in is None or made_in.resolve() != build_dir.resolve():
        cache.unlink(missing_ok=True)
        return
    raise ConfigError(
        f"the build tree {build_dir} was configured from {home}, not from {source}: another "
        "checkout shares the build directory",
        hint=f"give each checkout its own OPFORGE_BUILD_DIR, or remove {build_dir} to build "
        "this one there",
    )


def _require_record_writable(path: Path, root: Path) -> None:
    """``ConfigError`` before anything builds where the build record could not be written at
    the end: a link out of the project, or a folder in its place."""
    require_inside(root, path)
    if path.is_dir():
        raise ConfigError(
            f"{path} is a directory, where the build record is written",
            hint=f"remove the folder {path}, then build again",
        )


def _all_missing(missing: dict[str, ToolMissing]) -> ToolMissing:
    """One error for every missing tool and python package (keyed ``cmake``, ``python:torch``),
    so that one round of installs lets the build start."""
    if len(missing) == 1:
        return next(iter(missing.values()))
    packages = [key.removeprefix("python:") for key in missing if key.startswith("python:")]
    hints = [e.hint for key, e in missing.items() if not key.startswith("python:") and e.hint]
    if packages:
        hints.append(f"{sys.executable} -m pip install {' '.join(packages)}")
    return ToolMissing(
        f"{len(missing)} tools and packages missing: "
        + "; ".join(e.message for e in missing.values()),
        hint="; ".join(dict.fromkeys(hints)),
    )


def _remove_installed(prefix: Path, outputs: dict[str, str]) -> None:
    """Remove a target's recorded outputs from ``prefix`` before a build from scratch, so an
    output the fresh build no longer installs is not found, stale, and recorded as its own."""
    for key in outputs:
        relative = PurePosixPath(key)
        if key.startswith(WHEEL_KEY) or relative.is_absolute() or ".." in relative.parts:
            continue
        (prefix / relative).unlink(missing_ok=True)


class BuildEngine:
    """Builds a project's targets for one profile with one runner.

    ``image`` names the environment the build runs in (a container image's tag, or ``host``):
    same tool versions in another image are still another environment, so it is an input.
    ``tool_overrides`` are the tools named by variable (``opforge.settings.TOOL_VARIABLES``).
    """

    def __init__(
        self,
        project: Project,
        fetcher: Fetcher,
        runner: Runner,
        *,
        jobs: int | None = None,
        say: Callable[[str], None] = print,
        image: str = "host",
        tool_overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.project = project
        self.fetcher = fetcher
        self.runner = runner
        self.jobs = jobs or os.cpu_count() or 1
        self.say = say
        self.image = image
        self.tool_overrides = dict(tool_overrides or {})

    def build(self, targets: list[str], profile: str) -> list[TargetResult]:
        """Build ``targets`` (all when empty) and their dependencies for ``profile``."""
        pins = self.project.load_pins()
        book = self.project.load_recipes(pins)
        ordered = book.order(targets)
        for name in targets:
            if profile not in book.get(name).profiles:
                raise RecipeError(
                    f"{book.get(name).path}: profiles: target {name!r} has no {profile!r} profile",
                    hint=f"build it with --profile {' or '.join(book.get(name).profiles)}",
                )
        # Every tool of every target first: all missing ones are reported before anything builds.
        missing: dict[str, ToolMissing] = {}
        tools = {r.name: self._tools(r, profile, missing) for r in ordered if profile in r.profiles}
        if missing:
            raise _all_missing(missing)
        results: list[TargetResult] = []
        # dist/ is the project's own: the build record, the installs and the wheels are refused
        # through a link that leads out of it (a build directory may be anywhere).
        require_inside(self.project.root, self.project.dist_dir / profile)
        _require_record_writable(self.project.build_record, self.project.root)
        self.project.require_build_dir_apart()
        build_dir = make_dirs(self.project.build_dir, hint=BUILD_DIR_HINT)
        dist_dir = make_dirs(
            self.project.dist_dir,
            hint=f"the outputs go into the project's dist/: make {self.project.root} writable",
        )
        with hold_locks(dist_dir, build_dir, writer="build"):
            # Read under the lock: another build may have just written it.
            record = BuildRecord(self.project.build_record, root=self.project.root)
            for recipe in ordered:
                if profile in recipe.profiles:
                    _require_own_tree(
                        build_dir / profile / recipe.name,
                        self.project.root / recipe.cmake.source_dir,
                    )
            for recipe in ordered:
                if profile not in recipe.profiles:
                    results.append(TargetResult(recipe.name, "skipped", f"no {profile} profile"))
                    self.say(f"[{recipe.name}] skipped: no {profile} profile")
                    continue
                results.append(self._build_one(recipe, profile, pins, record, tools[recipe.name]))
        return results

    def _tools(
        self, recipe: Recipe, profile: str, missing: dict[str, ToolMissing]
    ) -> dict[str, Tool]:
        """The tools and python packages ``recipe`` needs for ``profile``; each one not found
        goes into ``missing`` instead (the first target needing it names it)."""
        why = f"needed by target {recipe.name}, profile {profile}"
        names = [*_BASE_TOOLS, *recipe.profiles[profile].requires]
        packages = [*recipe.python_packages, *(["wheel"] if recipe.wheel else [])]
        wanted = {
            name: (require_tool, (name, why, self.tool_overrides.get(name))) for name in names
        }
        wanted |= {f"python:{p}": (require_python_package, (p, why)) for p in packages}
        tools = {}
        for key, (find, arguments) in wanted.items():
            try:
                tools[key] = find(*arguments)
            except ToolMissing as exc:
                missing.setdefault(key, exc)
        return tools

    def _outputs(
        self, recipe: Recipe, profile: str, prefix: Path, wheel: Path | None
    ) -> tuple[dict[str, str], list[str]]:
        """The target's installed outputs (its wheel included) and the globs matching nothing."""
        outputs, unmatched = installed_outputs(prefix, recipe.outputs_for(profile))
        if recipe.wheel is not None:
            if wheel is None or not wheel.is_file():
                unmatched.append(f"wheel {recipe.wheel.name}")
            else:
                outputs[f"{WHEEL_KEY}{wheel.name}"] = hash_file(wheel)["sha256"]
        return outputs, unmatched

    def _wheel_path(self, record: TargetRecord) -> Path | None:
        names = list(recorded_wheels(record.outputs, self.project.build_record))
        return self.project.dist_dir / names[0] if names else None

    def _build_one(
        self,
        recipe: Recipe,
        profile: str,
        pins: PinSet,
        record: BuildRecord,
        tools: dict[str, Tool],
    ) -> TargetResult:
        root = self.project.root
        prefix = self.project.dist_dir / profile
        options = recipe.options_for(profile)
        dependency_outputs = {}
        for dep in recipe.depends_on:
            built = record.get(dep, profile)
            if built is None:
                raise BuildError(
                    f"target {recipe.name}: dependency {dep} has no {profile} build",
                    hint=f"build it first: opforge build {dep} --profile {profile}",
                )
            dependency_outputs[dep] = built.outputs
        digest, inputs = compute_inputs(
            recipe,
            profile,
            root,
            pins,
            options,
            list(tools.values()),
            dependency_outputs,
            self.image,
        )
        previous = record.get(recipe.name, profile)
        build_dir = self.project.build_dir / profile / recipe.name
        if previous is None:
            why = f"no {profile} build recorded"
        elif previous.inputs_sha256 != digest:
            why = describe_change(previous.inputs, inputs)
            if changed_categories(previous.inputs, inputs) & set(UNTRACKED_BY_BUILD_TOOL):
                why += "; in a fresh build tree"
                shutil.rmtree(build_dir, ignore_errors=True)
                _remove_installed(prefix, previous.outputs)
        else:
            current, unmatched = self._outputs(recipe, profile, prefix, self._wheel_path(previous))
            why = describe_output_change(previous.outputs, current, unmatched)
            if not why:
                self.say(f"[{recipe.name}] up to date ({profile})")
                return TargetResult(recipe.name, "up-to-date")

        self.say(f"[{recipe.name}] building ({profile}, runner {self.runner.name}): {why}")
        started = time.monotonic()
        if recipe.pins:
            self.say(f"[{recipe.name}] pins: {', '.join(recipe.pins)}")
        pin_paths = self.fetcher.fetch_many([pins.pins[name] for name in recipe.pins])
        log_path = build_dir / "opforge-build.log"
        make_dirs(build_dir, hint=BUILD_DIR_HINT)
        log_path.unlink(missing_ok=True)
        steps = cmake_steps(
            recipe,
            root=root,
            build_dir=build_dir,
            prefix=prefix,
            options=options,
            pin_paths={name: pin_paths[name] for name in recipe.pins},
            tools=tools,
            jobs=self.jobs,
        )
        for step in steps:
            self.say(f"[{recipe.name}] {step.name}")
            try:
                self.runner.run(step, log_path)
            except BuildError:
                if step.name == "configure":
                    # A failed configure can leave a cache the next one cannot parse (CMake
                    # reads it before the new -D values): the next build configures afresh.
                    (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
                raise
        installed, unmatched = installed_outputs(prefix, recipe.outputs_for(profile))
        if unmatched and any(p.is_dir() for p in prefix.glob(unmatched[0])):
            raise BuildError(
                f"target {recipe.name}: declared output {unmatched[0]!r} is a folder under "
                f"{prefix}, not files",
                hint=f"declare its files in `outputs:` of {recipe.path}, e.g. "
                f"'{unmatched[0]}/**/*'",
            )
        if unmatched:
            raise BuildError(
                f"target {recipe.name}: declared output {unmatched[0]!r} was not installed under {prefix}",
                hint=f"fix `outputs:` in {recipe.path} or the install rules of the build",
            )
        outside = links_out_of(prefix, installed)
        if outside:
            # A wheel would carry the file it points at (/etc/passwd), and the record only the
            # link: a change there would neither show nor rebuild.
            raise BuildError(
                f"target {recipe.name}: output {outside[0]} is a link out of {prefix}",
                hint=f"install the file itself, or a link to one under {prefix}",
            )
        wheel = None
        if recipe.wheel is not None:
            self.say(f"[{recipe.name}] wheel")
            # A bare name is pinned to the version built against, by its public version: a local
            # label (+cpu, +cu130) would refuse an equivalent torch build.
            requires = [
                f"{p}=={tools[f'python:{p}'].version.split('+')[0]}" if is_bare_name(p) else p
                for p in recipe.wheel.requires
            ]
            wheel = build_wheel(
                prefix / recipe.wheel.root,
                wheel_files(prefix, recipe.wheel.root, installed),
                recipe.wheel.name,
                f"{__version__}+{profile}",
                requires,
                self.project.dist_dir,
            )
        outputs = dict(installed)
        if wheel is not None:
            outputs[f"{WHEEL_KEY}{wheel.name}"] = hash_file(wheel)["sha256"]
        duration = time.monotonic() - started
        record.put(
            recipe.name,
            TargetRecord(
                recipe=recipe.path.relative_to(root).as_posix(),
                profile=profile,
                inputs_sha256=digest,
                inputs=inputs,
                prefix=prefix.relative_to(root).as_posix(),
                outputs=outputs,
                duration_s=round(duration, 3),
            ),
        )
        self.say(f"[{recipe.name}] built in {duration:.1f}s")
        return TargetResult(recipe.name, "built", duration_s=duration)
