"""Code generators a recipe names (``generators:``): Python modules a target's build runs to
write part of its code, so their source files are part of the target's input fingerprint.

A generator is the project's code or opforge's own (``opforge.kernels``, which the CMake
projects run as ``python -m opforge.kernels``): a module with source files, found at the
project's root or as the interpreter running opforge finds it (the opforge package). A
standard-library or third-party module generates nothing for a build; naming one would
fingerprint files unrelated to it, or none at all (a built-in or frozen module has no file).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

from opforge.errors import RecipeError

# The opforge package, wherever it is installed (a checkout's src/opforge, or site-packages).
_OPFORGE = Path(__file__).resolve().parents[1]
_HINT = (
    "name a module of the project or of opforge that generates the target's code, "
    "e.g. opforge.kernels"
)


def _find(name: str, root: Path) -> ModuleSpec | None:
    """``name``'s spec: in project ``root`` first, then as the interpreter's finders find it,
    walking its packages without importing them either way: a package's ``__init__`` may do
    anything (exit, hang, print), and validating a recipe must not run it. (Found through
    ``sys.path`` alone, a project module was there for `python -m opforge` started at the root,
    and not for the `opforge` script, or from another folder.)"""
    return _walk(name, lambda part, path: PathFinder.find_spec(part, path), [str(root)]) or _walk(
        name, _find_by_finders, None
    )


def _walk(
    name: str,
    find: Callable[[str, list[str] | None], ModuleSpec | None],
    path: list[str] | None,
) -> ModuleSpec | None:
    """The spec of dotted ``name``, each package's found by ``find`` in its parent's folders."""
    parts = name.split(".")
    for i in range(len(parts)):
        prefix = ".".join(parts[: i + 1])
        loaded = sys.modules.get(prefix)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else find(prefix, path)
        if spec is None:
            return None
        if i == len(parts) - 1:
            return spec
        path = spec.submodule_search_locations
        if path is None:
            return None
    return None


def _find_by_finders(name: str, path: list[str] | None) -> ModuleSpec | None:
    """``name`` as the interpreter's finders (``sys.meta_path``: the path finder, an editable
    install's) find it, without loading it."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(name, path)
        except Exception:  # a finder's own failure: as if it had not found it
            continue
        if spec is not None:
            return spec
    return None


def _files(spec: ModuleSpec) -> list[Path]:
    """The folders of a package, or the file of a module; none for a built-in or frozen one."""
    if spec.submodule_search_locations:
        return [Path(location) for location in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.has_location and spec.origin else []


def _problem(spec: ModuleSpec, places: tuple[Path, ...]) -> str | None:
    """Why ``spec`` cannot be a generator (None when it can): where it is, or that it is not."""
    files = _files(spec)
    if not files or not all(f.exists() for f in files):
        return "has no source file (a built-in or frozen module)"
    for path in files:
        real = path.resolve()
        if not any(real == place or place in real.parents for place in places):
            return f"is at {path}, outside the project and the opforge package"
    return None


def generator_files(name: str, root: Path, where: str) -> dict[str, Path]:
    """The source files of generator ``name`` (every ``.py`` file of a package), as the
    interpreter running opforge, which the build runs it with, finds them in project ``root``
    or the opforge package.

    Keys are module-relative (``opforge.kernels``, ``opforge.kernels:gen/torch.py``), so the
    same code installed elsewhere keys the same. A name that is no such module raises
    ``RecipeError`` whose message starts with ``where`` (the recipe file and key).
    """
    if not all(part.isidentifier() for part in name.split(".")):
        raise RecipeError(f"{where}: {name!r} is not a Python module name", hint=_HINT)
    places = (root.resolve(), _OPFORGE)
    top = name.partition(".")[0]
    # The top-level package first, which finding does not import: a module outside the
    # project and opforge is refused before any code of it runs.
    for part in dict.fromkeys((top, name)):
        spec = _find(part, root)
        if spec is None:
            raise RecipeError(f"{where}: no Python module {name!r} in {sys.executable}", hint=_HINT)
        problem = _problem(spec, places)
        if problem:
            shown = f"{name!r}" if part == name else f"{name!r}: its package {part!r}"
            raise RecipeError(f"{where}: {shown} {problem}", hint=_HINT)
    found: dict[str, Path] = {}
    if spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            for path in sorted(Path(location).rglob("*.py")):
                found[f"{name}:{path.relative_to(location).as_posix()}"] = path
    else:
        found[name] = Path(spec.origin)
    return found
