"""An opforge project on disk: its root, pins file, recipes and the paths of its other files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError
from opforge.paths import BUILD_DIR, DIST_DIR, PROJECT_MARKER, resolved
from opforge.pins.model import PinSet, load_pins
from opforge.recipes.loader import RecipeBook, load_recipes
from opforge.settings import Settings

BUILD_RECORD = "build-record.json"


@dataclass(frozen=True)
class Project:
    """Paths of one checkout; ``load_*`` read and validate its files on demand.

    ``build_tree`` moves the scratch space (a containerised build has its own); None:
    ``<root>/build``.
    """

    root: Path
    pins_path: Path
    build_tree: Path | None = None

    @property
    def recipes_dir(self) -> Path:
        """Where the recipes live."""
        return self.root / "recipes"

    @property
    def build_dir(self) -> Path:
        """Scratch space for build trees, image contexts and logs (safe to delete)."""
        return self.build_tree or self.root / BUILD_DIR

    @property
    def dist_dir(self) -> Path:
        """Installed outputs, wheels and the build record."""
        return self.root / DIST_DIR

    @property
    def build_record(self) -> Path:
        """What each target's last build was made from and produced (``dist/build-record.json``)."""
        return self.dist_dir / BUILD_RECORD

    @property
    def images_dir(self) -> Path:
        """Dockerfiles, their scripts and ``versions.yaml``."""
        return self.root / "images"

    @property
    def versions_file(self) -> Path:
        """``images/versions.yaml``: the CUDA x cuDNN combinations the images are built for."""
        return self.images_dir / "versions.yaml"

    @property
    def matrix_file(self) -> Path:
        """``ci/matrix.yaml``: the nightly matrix."""
        return self.root / "ci" / "matrix.yaml"

    def image_staging(self, flavour: str, kind: str) -> Path:
        """Where an image's build context is assembled (``require_build_dir_apart`` first: an
        earlier context there is replaced)."""
        self.require_build_dir_apart()
        return self.build_dir / "images" / f"{flavour}-{kind}"

    def require_build_dir_apart(self) -> None:
        """``ConfigError`` for a build directory that holds the project, is ``dist/`` or lies
        in it (links followed): build trees and image contexts, which replace what is in their
        way, would mix with the sources or the outputs, and its lock would be dist's own."""
        build = resolved(self.build_dir, "the build directory")
        root, dist = resolved(self.root, "the project"), resolved(self.dist_dir, "dist/")
        if root.is_relative_to(build):
            raise ConfigError(
                f"the build directory {self.build_dir} holds the project, {self.root}",
                hint="point OPFORGE_BUILD_DIR at a directory apart from the project's sources",
            )
        if build.is_relative_to(dist):
            raise ConfigError(
                f"the build directory {self.build_dir} overlaps the project's outputs, "
                f"{self.dist_dir}",
                hint=f"point OPFORGE_BUILD_DIR at a directory apart from {self.dist_dir}",
            )

    def load_pins(self) -> PinSet:
        """The validated pins file."""
        return load_pins(self.pins_path)

    def load_recipes(self, pins: PinSet, extra: list[Path] | None = None) -> RecipeBook:
        """All recipes under ``recipes/`` plus ``extra`` files, validated against ``pins``."""
        return load_recipes([self.recipes_dir, *(extra or [])], pins, self.root)


def open_project(settings: Settings) -> Project:
    """The project the settings name (or the one around their working directory)."""
    root = settings.project_root()
    return Project(root, settings.pins_file or root / PROJECT_MARKER, settings.build_dir)
