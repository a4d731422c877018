"""The build record (``dist/build-record.json``): per target and profile, the digest of its
inputs and of its outputs."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opforge.atomic import write_text
from opforge.errors import BuildError, ConfigError
from opforge.requirements import has_control_character
from opforge.yamlfile import read_text_file

SCHEMA_VERSION = 1
# Far above any record's size (a few KB a target): one past it is damaged, not read.
_RECORD_BYTES = 16 << 20
# Prefix of the output keys naming a target's wheel, a file directly in dist/.
WHEEL_KEY = "wheel:"


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

    @classmethod
    def from_json(cls, data: object) -> TargetRecord:
        """The record ``data`` (one profile's entry of the file) holds; ``TypeError`` when its
        fields are not of their types (an edited or damaged file)."""
        if not isinstance(data, dict):
            raise TypeError("a record is a JSON object")
        record = cls(**data)
        texts = (record.recipe, record.profile, record.inputs_sha256, record.prefix)
        if (
            not all(isinstance(t, str) for t in texts)
            or not isinstance(record.inputs, dict)
            or not isinstance(record.outputs, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in record.outputs.items())
            or isinstance(record.duration_s, bool)
            or not isinstance(record.duration_s, int | float)
        ):
            raise TypeError("a field of the record is not of its type")
        return record


def recorded_wheels(outputs: dict[str, str], record_path: Path) -> dict[str, str]:
    """The wheels among a target's recorded ``outputs``: file name in dist/ to sha256.

    A build writes its wheels into dist/ itself, so a name that is not a bare ``.whl`` file name
    (``../../x.whl``, a path, a control character) can only come from an edited record: refused
    (``BuildError``), since a path would point pip, or the up-to-date check, outside dist/.
    """
    wheels = {}
    for key, digest in outputs.items():
        if not key.startswith(WHEEL_KEY):
            continue
        name = key.removeprefix(WHEEL_KEY)
        if not name.endswith(".whl") or Path(name).name != name or has_control_character(name):
            raise BuildError(
                f"{record_path}: output {key!r} is not the file name of a wheel in "
                f"{record_path.parent}",
                hint=f"the record was altered: remove {record_path} and build again",
            )
        wheels[name] = digest
    return wheels


class BuildRecord:
    """The build record file, read once and written atomically after each target.

    ``root``: the folder its writes must stay in, links followed (default: the record's own
    folder); the build engine passes the project root, so a dist/ linked out of it is refused.
    """

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root or path.parent
        self.targets: dict[str, dict[str, TargetRecord]] = {}
        # Why a record that is there could not be used (None: it was, or there is none). A
        # damaged record only costs a build a rebuild, as it is rewritten whole afterwards;
        # what installs from it says so.
        self.problem: str | None = None
        if os.path.lexists(path):
            self._load()

    def _load(self) -> None:
        try:
            # Regular files only, and bounded: a FIFO would block, a huge file fill memory.
            data = json.loads(read_text_file(self.path, limit=_RECORD_BYTES))
            schema = data.get("schema")
            if type(schema) is not int or schema != SCHEMA_VERSION:  # `true` equals 1
                self.problem = f"it is not a version {SCHEMA_VERSION} build record"
                return
            for name, profiles in data["targets"].items():
                self.targets[name] = {p: TargetRecord.from_json(rec) for p, rec in profiles.items()}
        except ConfigError as exc:
            self.problem, self.targets = exc.message, {}
        except OSError as exc:
            self.problem, self.targets = exc.strerror or str(exc), {}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            self.problem, self.targets = "it is damaged (not the JSON a build writes)", {}

    def get(self, target: str, profile: str) -> TargetRecord | None:
        """The last record for ``target`` built with ``profile``, if any."""
        return self.targets.get(target, {}).get(profile)

    def put(self, target: str, record: TargetRecord) -> None:
        """Record a successful build and save the file."""
        self.targets.setdefault(target, {})[record.profile] = record
        self.save()

    def save(self) -> None:
        """Write the file via a temporary file and an atomic rename, refused when a link on the
        way from ``root`` or in its place leads out of ``root``."""
        data = {
            "schema": SCHEMA_VERSION,
            "targets": {
                name: {p: asdict(rec) for p, rec in sorted(profiles.items())}
                for name, profiles in sorted(self.targets.items())
            },
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        write_text(self.path, text, root=self.root)
