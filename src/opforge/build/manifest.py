"""``dist/manifest.json``: per target and profile, the digest of its inputs and of its outputs."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opforge.errors import ConfigError

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


class Manifest:
    """The manifest file, read once and written atomically after each target."""

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
        except (ValueError, KeyError, TypeError):
            # A damaged manifest only costs a rebuild; it is rewritten whole afterwards.
            self.targets = {}

    def get(self, target: str, profile: str) -> TargetRecord | None:
        """The last record for ``target`` built with ``profile``, if any."""
        return self.targets.get(target, {}).get(profile)

    def put(self, target: str, record: TargetRecord) -> None:
        """Record a successful build and save the manifest."""
        self.targets.setdefault(target, {})[record.profile] = record
        self.save()

    def save(self) -> None:
        """Write the manifest via a temporary file and an atomic rename."""
        data = {
            "schema": SCHEMA_VERSION,
            "targets": {
                name: {p: asdict(rec) for p, rec in sorted(profiles.items())}
                for name, profiles in sorted(self.targets.items())
            },
        }
        temp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix="manifest.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2, sort_keys=True)
                out.write("\n")
            os.replace(temp, self.path)
            temp = None
        except OSError as exc:
            raise ConfigError(f"cannot write {self.path}: {exc.strerror}") from None
        finally:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)
