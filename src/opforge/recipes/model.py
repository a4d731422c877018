"""A validated recipe: what one build target is made of and how it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

OptionValue = str | bool | int


@dataclass(frozen=True)
class Profile:
    """A build flavour of a recipe (``cpu`` or ``gpu``): extra options, required tools and the
    outputs only this profile installs."""

    name: str
    options: dict[str, OptionValue] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CMakeSpec:
    """How a ``cmake`` recipe is configured: source dir (project-relative) and cache options."""

    source_dir: str
    options: dict[str, OptionValue] = field(default_factory=dict)


@dataclass(frozen=True)
class TestSpec:
    """The command that verifies a built target."""

    command: tuple[str, ...]


@dataclass(frozen=True)
class WheelSpec:
    """Packaging of installed files as a wheel: its name, the directory under the install prefix
    that becomes the wheel's root, and the python packages it requires at the built versions."""

    name: str
    root: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recipe:
    """One build target, as declared in ``recipes/NAME.yaml``."""

    name: str
    path: Path
    raw: dict
    sources: tuple[str, ...]
    cmake: CMakeSpec
    profiles: dict[str, Profile]
    outputs: tuple[str, ...]
    pins: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    description: str = ""
    test: TestSpec | None = None
    python_packages: tuple[str, ...] = ()
    wheel: WheelSpec | None = None
    generators: tuple[str, ...] = ()

    def options_for(self, profile: str) -> dict[str, OptionValue]:
        """CMake cache options for ``profile``: the recipe's, overridden by the profile's."""
        base = dict(self.cmake.options)
        base.update(self.profiles[profile].options)
        return base

    def outputs_for(self, profile: str) -> tuple[str, ...]:
        """Output globs of ``profile``: the recipe's, then the profile's own."""
        return self.outputs + self.profiles[profile].outputs


def recipe_from_dict(path: Path, raw: dict) -> Recipe:
    """Build a ``Recipe`` from a dict that already passed schema validation."""
    cmake = raw["cmake"]
    test = raw.get("test")
    return Recipe(
        name=raw["name"],
        path=path,
        raw=raw,
        sources=tuple(raw["sources"]),
        cmake=CMakeSpec(cmake["source_dir"], dict(cmake.get("options", {}))),
        profiles={
            name: Profile(
                name,
                dict(p.get("options", {})),
                tuple(p.get("requires", ())),
                tuple(p.get("outputs", ())),
            )
            for name, p in raw["profiles"].items()
        },
        outputs=tuple(raw["outputs"]),
        pins=tuple(raw.get("pins", ())),
        depends_on=tuple(raw.get("depends_on", ())),
        description=raw.get("description", ""),
        test=TestSpec(tuple(test["command"])) if test else None,
        python_packages=tuple(raw.get("python_packages", ())),
        wheel=WheelSpec(
            raw["wheel"]["name"], raw["wheel"]["root"], tuple(raw["wheel"].get("requires", ()))
        )
        if "wheel" in raw
        else None,
        generators=tuple(raw.get("generators", ())),
    )
