"""Keeping recipe paths inside their place: sources and source dirs in the project, outputs and
wheel roots in the install prefix (``dist/<profile>``).

A path is checked as written (relative, no ``..``) and, for paths into the checkout, as found on
disk: a symbolic link that leads out of the project, or back up into a directory holding it
(where a ``**`` glob would loop), is refused, because globbing follows links.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from opforge.links import follow_links
from opforge.paths import BUILD_DIR, DIST_DIR
from opforge.requirements import has_control_character

_WILDCARD = re.compile(r"[*?\[]")


def lexical_problem(value: str, inside: str) -> str | None:
    """What is wrong with ``value`` as a path relative to ``inside`` (None when nothing is)."""
    if not value.strip():
        return "is empty"
    if has_control_character(value):
        return f"{value!r} contains a control character"
    path = PurePosixPath(value)
    if not path.parts:
        return f"{value!r} names the directory itself; a pattern names files in it (e.g. '**/*')"
    if path.is_absolute() or value.startswith("~"):
        return f"{value!r} is an absolute path; paths here are relative to {inside}"
    if ".." in path.parts:
        return f"{value!r} leaves {inside} ('..' is not allowed)"
    return None


def glob_problem(pattern: str) -> str | None:
    """What is wrong with ``pattern`` as a glob (None when nothing is). Before Python 3.13
    pathlib refuses a '**' inside a name and a trailing '**' matches folders alone; from 3.13 on
    the first is '*' and the second matches files too: either way the files a pattern names
    would depend on the Python. ``pattern`` passed ``lexical_problem``."""
    parts = PurePosixPath(pattern).parts
    if any("**" in part and part != "**" for part in parts):
        return f"{pattern!r} has '**' inside a name; '**' must be a whole path component"
    if parts[-1] == "**":
        return f"{pattern!r} ends in '**', which matches folders, not files"
    return None


def source_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot name a target's sources though it is a fine glob (None when it
    can): one that reaches into the folders opforge writes would fingerprint the build's own
    outputs, which change with every build. ``pattern`` passed ``glob_problem``."""
    parts = PurePosixPath(pattern).parts
    for written in (BUILD_DIR, DIST_DIR):
        if len(parts) > 1 and fnmatchcase(written, parts[0]):
            return (
                f"{pattern!r} also matches in {written}/, which opforge writes, so the target "
                "would never be up to date"
            )
    return None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def link_problem(root: Path, pattern: str) -> str | None:
    """A symbolic link a glob of ``pattern`` under ``root`` would follow out of ``root`` (or
    into a loop), described; None when there is none. ``pattern`` passed ``lexical_problem``."""
    real_root = root.resolve()
    parts = PurePosixPath(pattern).parts
    literal = _literal_prefix(parts)
    start = root.joinpath(*literal)
    for path in [root.joinpath(*literal[:i]) for i in range(1, len(literal) + 1)]:
        if path.is_symlink():
            problem = _check_link(path, root, real_root)
            if problem:
                return problem
    if len(literal) == len(parts) or not start.is_dir():
        return None
    # Globbing follows links to directories (`*` parts too), so the walk does: a link as the
    # start, or below it, that stays inside (checked before the walk enters it) is walked at
    # its target, each real directory once, so that links between siblings cannot loop.
    seen: set[str] = set()
    for directory, dirnames, filenames in os.walk(start, followlinks=True):
        real = os.path.realpath(directory)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        for name in (*dirnames, *filenames):
            path = Path(directory, name)
            if path.is_symlink():
                problem = _check_link(path, root, real_root)
                if problem:
                    return problem
    return None


def _literal_prefix(parts: tuple[str, ...]) -> list[str]:
    prefix = []
    for part in parts:
        if _WILDCARD.search(part):
            break
        prefix.append(part)
    return prefix


def _check_link(path: Path, root: Path, real_root: Path) -> str | None:
    target = follow_links(path)
    inside = root if path.is_relative_to(root) else real_root
    shown = path.relative_to(inside).as_posix()
    if target is None:
        return f"{shown} is a loop of symbolic links"
    if not _inside(target, real_root):
        return f"{shown} is a link to {target}, outside the project"
    if target.is_dir() and _inside(path.parent.resolve(), target):
        return f"{shown} is a link back to {target}, so globbing through it would loop"
    return None
