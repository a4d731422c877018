"""The build record (``dist/build-record.json``): per target and profile, the digest of its
inputs and of its outputs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opforge.atomic import write_text

SCHEMA_VERSION = 1


@dataclass
class TargetRecord:
    """What one build of a target produced, and from what."""

    recipe: str
    profile: str
    inputs_sha256: str
    inputs: dict
    prefix: str
    outputs: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0


class BuildRecord:
    """The build record file, read once and written atomically after each target."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.targets: dict[str, dict[str, TargetRecord]] = {}
        if path.is_file():
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("schema") != SCHEMA_VERSION:
                return
            for name, profiles in data["targets"].items():
                self.targets[name] = {p: TargetRecord(**rec) for p, rec in profiles.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            # A damaged record only costs a rebuild; it is rewritten whole afterwards.
            self.targets = {}

    def get(self, target: str, profile: str) -> TargetRecord | None:
        """The last record for ``target`` built with ``profile``, if any."""
        return self.targets.get(target, {}).get(profile)

    def put(self, target: str, record: TargetRecord) -> None:
        """Record a successful build and save the file."""
        self.targets.setdefault(target, {})[record.profile] = record
        self.save()

    def save(self) -> None:
        """Write the file via a temporary file and an atomic rename, refused when a link in its
        place leads out of its folder (``dist/``, which may itself be a link: the installs of
        the build go through it as well)."""
        data = {
            "schema": SCHEMA_VERSION,
            "targets": {
                name: {p: asdict(rec) for p, rec in sorted(profiles.items())}
                for name, profiles in sorted(self.targets.items())
            },
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        write_text(self.path, text, root=self.path.parent)
