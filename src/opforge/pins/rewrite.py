"""Changing one pin's digests in checksums.yaml while leaving every other byte as it was."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from opforge.atomic import require_inside
from opforge.errors import ConfigError
from opforge.yamledit import apply, find, render, rewrite_file
from opforge.yamlfile import parse_yaml, read_text_file


def require_writable_pins(path: Path) -> None:
    """Raise ``ConfigError`` when a rewrite of pins file ``path`` would leave its folder: a link
    there is followed only to a file in the same folder (or below it), as every write of
    opforge's stays in the folder it belongs to."""
    require_inside(path.parent, path)


def rewrite_pin(path: Path, name: str, changes: dict[str, str | int]) -> None:
    """Set ``changes`` (keys among sha256, md5, size) on pin ``name``; the keys must exist.

    A pins file that is a link to a file in its folder is updated where it points, the link
    kept: the target is the pins file just read and checked, and only its digests change. A
    link out of the folder is refused (``require_writable_pins``)."""
    folder = Path(path).parent
    require_writable_pins(Path(path))
    path = Path(os.path.realpath(path))
    text = read_text_file(path)
    # Check the text as read now with the shared loader: with a duplicate key, the node found
    # below could be another entry than the pin validated before the download.
    parse_yaml(path, text)
    pin_node = find(yaml.compose(text), "pins", name)
    if pin_node is None:
        raise ConfigError(
            f"{path}: pins.{name}: not found",
            hint="the file changed while the pin was downloaded; run the update again",
        )
    edits = []
    for key, value in changes.items():
        node = find(pin_node, key)
        if not isinstance(node, yaml.ScalarNode):
            raise ConfigError(
                f"{path}: pins.{name}.{key}: missing",
                hint=f'add `{key}: ""` to the pin, then run the update again',
            )
        edits.append((node, render(value, node)))
    # Nothing is written unless the edited text reads back as the pin with the new digests (a
    # value laid out in a way the in-place edit does not handle would corrupt the file).
    edited = find(yaml.compose(apply(text, edits)), "pins", name)
    for key, value in changes.items():
        node = find(edited, key)
        if not isinstance(node, yaml.ScalarNode) or node.value != str(value):
            raise ConfigError(
                f"{path}: pins.{name}.{key}: could not be rewritten in place; nothing was written",
                hint=f"write `{key}: {value}` on one line in the pin by hand",
            )
    # The link was followed on purpose above: the file it names is the one to change.
    rewrite_file(path, text, edits, root=folder)
