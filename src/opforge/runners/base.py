"""What every runner executes: a named step with its command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Step:
    """One command of a build: a short name for progress output, argv, cwd and extra env."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


class Runner(Protocol):
    """Something that can execute build steps and say where it runs them."""

    name: str

    def run(self, step: Step, log_path: Path) -> None:
        """Run ``step``, teeing its output to ``log_path``; raise ``BuildError`` on failure."""
        ...
