"""Reading a YAML file with errors that give the file and the line."""

from __future__ import annotations

from pathlib import Path

import yaml

from opforge.errors import ConfigError


def parse_yaml(path: Path, text: str, error: type[ConfigError] = ConfigError) -> object:
    """Parse ``text`` (read from ``path``); a syntax error raises ``error`` naming file and line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise error(
            f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}",
            hint="fix the YAML syntax",
        ) from None
