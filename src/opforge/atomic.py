"""Replacing a file whole: readers see the old content or the new, never a partial write.

Every write of a project file goes through :func:`write_text`, which first checks with
:func:`require_inside` that no symbolic link carries the write out of the folder it belongs to.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opforge.errors import ConfigError
from opforge.links import follow_links


def _shown(path: Path, root: Path) -> Path:
    """``path`` relative to ``root`` where it lies below it, else as given."""
    try:
        return path.relative_to(root)
    except ValueError:
        return path


def _offending_link(root: Path, inside: Path, path: Path) -> Path:
    """The first link on the way from ``root`` to ``path`` that loops or leads out of
    ``inside`` (``root`` resolved), so that the hint names what to remove; ``path`` itself when
    none is found (``..`` rather than a link leads out)."""
    if not path.is_relative_to(root):
        return path
    step = root
    for part in path.relative_to(root).parts:
        step = step / part
        if step.is_symlink():
            target = follow_links(step)
            if target is None or not target.is_relative_to(inside):
                return step
    return path


def require_inside(root: Path, path: Path) -> None:
    """Raise ``ConfigError`` unless a write to ``path`` stays inside ``root``: neither a linked
    directory on the way nor a link in ``path``'s own place may lead out of ``root`` or loop.

    A link at ``path`` that stays inside is fine (``replacing`` swaps it for a file). One that
    leads out is refused rather than silently replaced: it is either a hostile clone or the
    user's own arrangement, and either way they should learn of it before opforge acts."""
    inside = follow_links(root)
    parent = follow_links(path.parent)
    if inside is None or parent is None:
        target = None
    else:
        target = follow_links(path) if path.is_symlink() else parent / path.name
    if target is not None and target.is_relative_to(inside):
        return
    shown = _shown(path, root)
    link = path if inside is None else _offending_link(root, inside, path)
    if link.is_symlink():
        hint = f"remove the link {_shown(link, root)}: opforge does not write {shown} through it"
    else:
        hint = f"opforge writes {shown} only inside {root}"
    if target is None:
        raise ConfigError(f"{shown} is a loop of symbolic links", hint=hint)
    raise ConfigError(f"{shown} leads out of {root}, to {target}", hint=hint)


@contextmanager
def replacing(path: Path, *, keep_mode: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` for the caller to write; renamed over ``path`` when the
    block ends, removed if it raises. ``keep_mode``: the new file gets the old one's permissions
    (mkstemp creates 0600). A symbolic link at ``path`` is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        if keep_mode and path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        else:
            # What a plain open() would have created, instead of mkstemp's owner-only mode.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, *, root: Path, keep_mode: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, refused (``ConfigError``) when a link would
    carry it out of ``root``, the folder the file belongs in; an OS failure is a ``ConfigError``."""
    require_inside(root, path)
    try:
        with replacing(path, keep_mode=keep_mode) as temp:
            temp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write {path}: {exc.strerror}",
            hint=f"check that {path.parent} exists and you can write there (permissions, space)",
        ) from None
