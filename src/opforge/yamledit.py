"""Changing scalars of a YAML file in place, leaving every other byte as it was.

A YAML round-trip would lose comments and formatting, so instead the document is composed to
find the exact character spans of the scalars to change, and only those spans are replaced.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from opforge.atomic import write_text

Key = str | int


def find(node: yaml.Node | None, *keys: Key) -> yaml.Node | None:
    """The node at ``keys`` below ``node`` (mapping keys are strings, sequence indices ints)."""
    for key in keys:
        if isinstance(key, int) and isinstance(node, yaml.SequenceNode):
            node = node.value[key] if 0 <= key < len(node.value) else None
        elif isinstance(key, str) and isinstance(node, yaml.MappingNode):
            node = next(
                (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key),
                None,
            )
        else:
            return None
    return node


def render(value: str | int, original: yaml.ScalarNode, quote: str | None = None) -> str:
    """``value`` as YAML text in the place of ``original``: in its quotes, or in ``quote``, or
    bare when it loads back as itself."""
    text = str(value)
    if quote is None:
        quote = original.style if original.style in ("'", '"') else None
    # A bare all-digit or exponent-looking digest would load back as a number.
    if quote is None and isinstance(value, str) and yaml.safe_load(text) != value:
        quote = '"'
    return f"{quote}{text}{quote}" if quote else text


def apply(text: str, edits: list[tuple[yaml.ScalarNode, str]]) -> str:
    """``text`` with each node's span replaced by its new text."""
    spans = sorted(((n.start_mark.index, n.end_mark.index, new) for n, new in edits), reverse=True)
    for start, end, replacement in spans:
        if start == end and text[start - 1 : start] == ":":
            # An empty value (`sha256:`) has its span right after the colon: a value written
            # there needs the space YAML requires after a key's colon.
            replacement = " " + replacement
        if text[start:end].endswith("\n"):
            # A block scalar (`|`, `>-`) spans its lines' breaks: the next key keeps its line.
            replacement += "\n"
        text = text[:start] + replacement + text[end:]
    return text


def rewrite_file(
    path: Path, text: str, edits: list[tuple[yaml.ScalarNode, str]], *, root: Path
) -> None:
    """Write ``text`` with ``edits`` applied over ``path``, atomically, keeping its mode; refused
    when a link would carry the write out of ``root``."""
    write_text(path, apply(text, edits), root=root, keep_mode=True)
