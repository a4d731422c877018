"""Changing one pin's digests in checksums.yaml while leaving every other byte as it was.

A YAML round-trip would lose comments and formatting, so instead the document is composed to
find the exact character spans of the scalars to change, and only those spans are replaced.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from opforge.errors import ConfigError


def _mapping_value(node: yaml.Node, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None


def _render(value: str | int, original: yaml.ScalarNode) -> str:
    text = str(value)
    quote = original.style if original.style in ("'", '"') else None
    # A bare all-digit or exponent-looking digest would load back as a number.
    if quote is None and isinstance(value, str) and yaml.safe_load(text) != value:
        quote = '"'
    return f"{quote}{text}{quote}" if quote else text


def rewrite_pin(path: Path, name: str, changes: dict[str, str | int]) -> None:
    """Set ``changes`` (keys among sha256, md5, size) on pin ``name``; the keys must exist."""
    text = path.read_text(encoding="utf-8")
    root = yaml.compose(text)
    pin_node = _mapping_value(_mapping_value(root, "pins"), name) if root else None
    if pin_node is None:
        raise ConfigError(f"{path}: pins.{name}: not found")
    edits: list[tuple[int, int, str]] = []
    for key, value in changes.items():
        node = _mapping_value(pin_node, key)
        if not isinstance(node, yaml.ScalarNode):
            raise ConfigError(
                f"{path}: pins.{name}.{key}: missing",
                hint=f'add `{key}: ""` to the pin, then run the update again',
            )
        edits.append((node.start_mark.index, node.end_mark.index, _render(value, node)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    fd, temp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temp, path.stat().st_mode & 0o777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
