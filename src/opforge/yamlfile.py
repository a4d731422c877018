"""Reading a project YAML file safely, with errors that give the file and the line.

Project files (pins, recipes, the CI matrix, image versions, the op table) are small,
hand-written and untrusted in the sense that a clone can carry anything. So: a size cap, UTF-8
only, libyaml's C parser where installed, no anchors or aliases (a 1 KB "billion laughs" file
expands into gigabytes once anything walks it), a nesting limit (deep nesting exhausts Python's
recursion in the constructor), and no duplicate mapping keys (PyYAML keeps the last silently, so
a second ``sha256:`` or a second pin of the same name would quietly replace the first).

Every project file is read through ``read_yaml_file`` or ``parse_yaml``; nothing else in opforge
calls ``yaml.load``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from opforge.errors import ConfigError

MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
MAX_NUMBER_CHARS = 100

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names the same key twice: ``key``, where it is repeated and where it was first."""

    def __init__(self, key: object, again: yaml.Mark, first: yaml.Mark) -> None:
        super().__init__(problem=f"duplicate key {key!r}", problem_mark=again)
        self.key = key
        self.again = again
        self.first = first


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """The safe loader (libyaml's where installed) refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """The mapping of ``node``, or ``_DuplicateKey`` at the second occurrence of a key."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[object, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise _DuplicateKey(key, key_node.start_mark, seen[key])
                    seen[key] = key_node.start_mark
                except TypeError:
                    continue  # an unhashable key: the base class reports it
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An int of at most ``MAX_NUMBER_CHARS`` characters: a longer one (5000 hex digits)
        would make an int Python cannot print, or one of more than 4300 decimal digits it
        refuses to read, each a traceback later."""
        if len(node.value) > MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                problem=f"a number of {len(node.value)} characters; no value in a project file "
                f"needs more than {MAX_NUMBER_CHARS}",
                problem_mark=node.start_mark,
            )
        return super().construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def _line(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1}" if mark is not None else ""


def _too_deep(path: Path, where: str, error: type[ConfigError]) -> ConfigError:
    return error(
        f"{path}: YAML nested deeper than {MAX_YAML_DEPTH} levels{where}",
        hint="flatten the structure; no opforge file needs that depth",
    )


def _check_structure(path: Path, text: str, error: type[ConfigError]) -> None:
    """Refuse anchors, aliases and deep nesting while only scanning events (nothing is built)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise error(
                f"{path}: YAML anchors and aliases are not allowed{_line(event)}",
                hint="write the value out in full where it is used",
            )
        if isinstance(event, _OPENING):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(path, _line(event), error)
        elif isinstance(event, _CLOSING):
            depth -= 1


def parse_yaml(path: Path, text: str, error: type[ConfigError] = ConfigError) -> object:
    """Parse ``text`` (read from ``path``); any problem raises ``error`` naming file and line."""
    if len(text) > MAX_YAML_BYTES:
        raise error(
            f"{path}: {len(text)} characters is over the {MAX_YAML_BYTES} limit for a YAML file",
            hint="project YAML files are small; check that this is the file you meant",
        )
    try:
        _check_structure(path, text, error)
        return yaml.load(text, Loader=_Loader)  # _Loader is a safe loader
    except _DuplicateKey as exc:
        raise error(
            f"{path}: duplicate key {exc.key!r} at line {exc.again.line + 1} "
            f"(first at line {exc.first.line + 1})",
            hint="give each key once; YAML would silently keep only the last",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:
            # libyaml from PyYAML 6.0.4 on has its own nesting limit (1000), which its scanner
            # can reach while looking ahead, before _check_structure sees level 65.
            raise _too_deep(path, where, error) from None
        raise error(
            f"{path}: not valid YAML{where}: {problem}", hint="fix the YAML syntax"
        ) from None
    except ValueError as exc:
        # A constructor's own refusal, with no place in the file (a date like 2024-02-30).
        raise error(f"{path}: not valid YAML: {exc}", hint="fix the value") from None


def read_text_file(
    path: Path, error: type[ConfigError] = ConfigError, limit: int = MAX_YAML_BYTES
) -> str:
    """The UTF-8 text of the project file at ``path``, at most ``limit`` bytes, one-line errors.

    Only a regular file is read: a FIFO would block forever and a device never end, so the file
    is opened without blocking and its kind checked first. A missing file raises
    ``FileNotFoundError`` so callers can say what the file is for.
    """
    hint = f"check that {path} is a file you can read"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}", hint=hint) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise error(f"{path}: cannot read: {kind}", hint=f"{path} must be a file")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror}", hint=hint) from None
    if len(data) > limit:
        raise error(
            f"{path}: larger than the {limit} byte limit for this file",
            hint="project files are small; check that this is the file you meant",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})",
            hint="save the file as UTF-8",
        ) from None


def read_yaml_file(path: Path, error: type[ConfigError] = ConfigError) -> object:
    """Read and parse the YAML file at ``path`` (``read_text_file``), one-line errors.

    A missing file raises ``FileNotFoundError`` so callers can say what the file is for.
    """
    return parse_yaml(path, read_text_file(path, error), error)
