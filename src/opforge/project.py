"""An opforge project on disk: its root, pins file, recipes and output directories."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from opforge.pins.model import PinSet, load_pins
from opforge.recipes.loader import RecipeBook, load_recipes


@dataclass(frozen=True)
class Project:
    """Paths of one checkout; ``load_*`` read and validate its files on demand."""

    root: Path
    pins_path: Path

    @property
    def recipes_dir(self) -> Path:
        """Where the recipes live."""
        return self.root / "recipes"

    @property
    def build_dir(self) -> Path:
        """Scratch space for build trees and logs (safe to delete); OPFORGE_BUILD_DIR moves it
        (the docker runner gives containers their own)."""
        override = os.environ.get("OPFORGE_BUILD_DIR")
        return Path(override) if override else self.root / "build"

    @property
    def dist_dir(self) -> Path:
        """Installed outputs and ``manifest.json``."""
        return self.root / "dist"

    def load_pins(self) -> PinSet:
        """The validated pins file."""
        return load_pins(self.pins_path)

    def load_recipes(self, pins: PinSet, extra: list[Path] | None = None) -> RecipeBook:
        """All recipes under ``recipes/`` plus ``extra`` files, validated against ``pins``."""
        paths = [self.recipes_dir]
        seen = {p.resolve() for p in self.recipes_dir.glob("*.yaml")}
        paths += [p for p in (extra or []) if p.resolve() not in seen]
        return load_recipes(paths, pins, self.root)
