"""What an opforge run in a container is handed by the run that started it.

``--runner docker`` re-runs ``opforge build`` inside the devel image. The inner run learns where
the project, the download cache and its own build tree are, and which image it runs in (part of
every target's input fingerprint), from one ``--handoff`` JSON argument, not from variables
that would leak into everything it starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError

_FIELDS = ("project", "cache_dir", "build_dir", "image")


@dataclass(frozen=True)
class Handoff:
    """The project root, download cache and build tree (container paths) and the image tag."""

    project: Path
    cache_dir: Path
    build_dir: Path
    image: str

    def to_json(self) -> str:
        """One line of JSON, for the inner command line."""
        return json.dumps({name: str(getattr(self, name)) for name in _FIELDS}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Handoff:
        """The handoff ``to_json`` wrote; anything else is a ``ConfigError``."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or set(data) != set(_FIELDS):
                raise ValueError(f"expected the keys {', '.join(_FIELDS)}")
            if not all(isinstance(data[name], str) and data[name] for name in _FIELDS):
                raise ValueError("every value must be a non-empty string")
        except (ValueError, RecursionError) as exc:
            # RecursionError: JSON nested deeper than the parser's recursion allows.
            raise ConfigError(
                f"--handoff: not a container handoff ({type(exc).__name__}: {exc})",
                hint="--handoff is written by `opforge build --runner docker`; do not pass it by hand",
            ) from None
        return cls(
            Path(data["project"]), Path(data["cache_dir"]), Path(data["build_dir"]), data["image"]
        )
