"""Loading and validating recipes: schema, then paths and cross-references (pins, dependencies,
cycles). Every problem found is reported, not only the first."""

from __future__ import annotations

import graphlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from opforge.errors import RecipeError
from opforge.links import follow_links
from opforge.pins.model import PinSet
from opforge.recipes.generators import generator_files
from opforge.recipes.model import Recipe, recipe_from_dict
from opforge.recipes.options import option_problem
from opforge.recipes.paths import (
    glob_problem,
    lexical_problem,
    link_problem,
    source_pattern_problem,
)
from opforge.recipes.schema import PATTERN_RULES, RECIPE_SCHEMA, REMOVED_KEYS, SCHEMA_VERSIONS
from opforge.requirements import requirement_problem
from opforge.schema_errors import key_text, schema_problems
from opforge.yamlfile import read_yaml_file

_VALIDATOR = jsonschema.Draft202012Validator(RECIPE_SCHEMA)
_SCHEMA_HINT = "see the recipe schema in README.md"
_MISSING_HINT = "check the path: give a recipe .yaml file, or a directory of them"
_GLOB_HINT = "write '**' as a whole path component: 'src/**/*' is every file under src"
_SOURCE_HINT = "start the pattern at a source folder: 'src/**/*' is every file under src"


@dataclass(frozen=True)
class _Problem:
    """One thing wrong with a recipe: the line naming file and key, and how to fix it."""

    text: str
    hint: str | None = None


def _raise_if_any(problems: list[_Problem]) -> None:
    """One ``RecipeError`` for all problems: its first line is the first problem, complete, and
    the others follow one per line."""
    if not problems:
        return
    first, rest = problems[0], problems[1:]
    if not rest:
        raise RecipeError(first.text, hint=first.hint)
    hints = {p.hint for p in problems}
    raise RecipeError(
        f"{first.text} (and {len(rest)} more below)",
        hint=hints.pop() if len(hints) == 1 else "each line names the file and the key to fix",
        details=[f"  {p.text}" for p in rest],
    )


def _schema_problems(path: Path, raw: dict) -> list[_Problem]:
    return [
        _Problem(f"{path}: {text}", _SCHEMA_HINT)
        for text in schema_problems(_VALIDATOR, raw, PATTERN_RULES)
    ]


def _version_problem(path: Path, raw: dict) -> _Problem | None:
    """Why the recipe's format cannot be read (None when it can): a recipe names its format."""
    version = raw.get("schema")
    if version is None:
        return _Problem(
            f"{path}: schema: required key is missing",
            f"start the recipe with `schema: {SCHEMA_VERSIONS[-1]}`, the format it is written in",
        )
    # A whole number: True and 1.0 compare equal to 1 in Python, but are no format's number.
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        known = ", ".join(map(str, SCHEMA_VERSIONS))
        shown = json.dumps(version, default=str)  # as YAML spells it: true, "1", 1.0
        return _Problem(
            f"{path}: schema: {shown} is not a recipe format this opforge reads ({known})",
            "upgrade opforge to one that reads it, or write the recipe in a format it reads",
        )
    return None


def _without_removed_keys(path: Path, raw: dict) -> tuple[list[_Problem], dict]:
    """A problem for each key recipes no longer have (``REMOVED_KEYS``), saying what to do
    instead, and the recipe without them for the schema to judge the rest."""
    problems = []
    rest = {**raw, "test": dict(raw["test"])} if isinstance(raw.get("test"), dict) else dict(raw)
    for key, instead in REMOVED_KEYS.items():
        parent, _, leaf = key.rpartition(".")
        holder = rest.get(parent) if parent else rest
        if isinstance(holder, dict) and leaf in holder:
            del holder[leaf]
            problems.append(
                _Problem(
                    f"{path}: {key}: no longer a recipe key: {instead}",
                    f"delete `{leaf}:`{f' under `{parent}:`' if parent else ''} in {path}",
                )
            )
    return problems, rest


def _read_recipe(path: Path, problems: list[_Problem]) -> Recipe | None:
    """The recipe at ``path`` if it reads and passes the schema; else its problems are added."""
    try:
        raw = read_yaml_file(path, RecipeError)
    except FileNotFoundError:
        problems.append(_Problem(f"{path}: no such recipe file", _MISSING_HINT))
        return None
    except RecipeError as exc:
        problems.append(_Problem(exc.message, exc.hint))
        return None
    if not isinstance(raw, dict):
        problems.append(
            _Problem(f"{path}: expected a mapping at the top level", "see recipes/kernels.yaml")
        )
        return None
    version = _version_problem(path, raw)
    if version is not None:
        problems.append(version)
        return None
    found, rest = _without_removed_keys(path, raw)
    found += _schema_problems(path, rest)
    if found:
        problems.extend(found)
        return None
    recipe = recipe_from_dict(path, raw)
    problems.extend(_option_problems(recipe))
    return recipe


def _option_problems(recipe: Recipe) -> list[_Problem]:
    """A problem for each CMake option (the recipe's or a profile's) it may not set."""
    sections = [("cmake.options", recipe.cmake.options)]
    sections += [(f"profiles.{n}.options", p.options) for n, p in recipe.profiles.items()]
    found = []
    for where, options in sections:
        for key, value in options.items():
            refused = option_problem(key, value)
            if refused:
                problem, hint = refused
                found.append(
                    _Problem(
                        f"{recipe.path}: {where}.{key_text(key)}: recipe {recipe.name!r}: {problem}",
                        hint,
                    )
                )
    return found


def parse_recipe(path: Path) -> Recipe:
    """Read one recipe file and check it against the schema; the error lists every problem."""
    problems: list[_Problem] = []
    recipe = _read_recipe(path, problems)
    _raise_if_any(problems)
    assert recipe is not None
    return recipe


@dataclass(frozen=True)
class RecipeBook:
    """All recipes of a project, validated together."""

    recipes: dict[str, Recipe]

    def get(self, name: str) -> Recipe:
        """The recipe called ``name``, or a clear error listing the known ones."""
        try:
            return self.recipes[name]
        except KeyError:
            raise RecipeError(
                f"unknown target {name!r}",
                hint=f"known targets: {', '.join(sorted(self.recipes)) or '(none)'}",
            ) from None

    def order(self, targets: list[str] | None = None) -> list[Recipe]:
        """``targets`` (all when empty) and everything they depend on, dependencies first."""
        wanted: set[str] = set()
        stack = list(targets or self.recipes)
        while stack:
            recipe = self.get(stack.pop())
            if recipe.name not in wanted:
                wanted.add(recipe.name)
                stack.extend(recipe.depends_on)
        sorter = graphlib.TopologicalSorter(
            {name: sorted(self.recipes[name].depends_on) for name in sorted(wanted)}
        )
        return [self.recipes[name] for name in sorter.static_order()]


def is_bare_name(requirement: str) -> bool:
    """Whether a wheel requirement is a package name alone (pinned to the built-against version)."""
    return re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement) is not None


def _path_problems(recipe: Recipe, root: Path) -> list[_Problem]:
    """Sources and the CMake source dir must stay in the project, outputs and the wheel root in
    the install prefix; a source pattern must match something."""
    found: list[_Problem] = []
    where = recipe.path

    def add(key: str, problem: str, hint: str) -> None:
        found.append(_Problem(f"{where}: {key}: {problem}", hint))

    for i, pattern in enumerate(recipe.sources):
        # The walk for links last: a pattern refused as written is not walked.
        if problem := lexical_problem(pattern, "the project root"):
            add(f"sources[{i}]", problem, "sources are globs inside the project")
        elif problem := glob_problem(pattern):
            add(f"sources[{i}]", problem, _GLOB_HINT)
        elif problem := source_pattern_problem(pattern):
            add(f"sources[{i}]", problem, _SOURCE_HINT)
        elif problem := link_problem(root, pattern):
            add(f"sources[{i}]", problem, "sources are globs inside the project")
        elif not any(root.glob(pattern)):
            add(
                f"sources[{i}]",
                f"{pattern!r} matches no file under {root}",
                "source patterns are globs relative to the project root",
            )
    source_dir = recipe.cmake.source_dir
    problem = lexical_problem(source_dir, "the project root") or link_problem(root, source_dir)
    if problem:
        add("cmake.source_dir", problem, "source_dir is a directory inside the project")
    elif not (root / source_dir / "CMakeLists.txt").is_file():
        add(
            "cmake.source_dir",
            f"{source_dir!r} has no CMakeLists.txt",
            "source_dir is relative to the project root",
        )
    prefix = "dist/<profile>"
    declared = [(f"outputs[{i}]", p) for i, p in enumerate(recipe.outputs)]
    declared += [
        (f"profiles.{name}.outputs[{i}]", p)
        for name, profile in recipe.profiles.items()
        for i, p in enumerate(profile.outputs)
    ]
    for key, pattern in declared:
        problem = lexical_problem(pattern, prefix)
        if problem:
            add(key, problem, f"outputs are globs under the install prefix {prefix}")
        elif problem := glob_problem(pattern):
            add(key, problem, _GLOB_HINT)
    if recipe.wheel:
        problem = lexical_problem(recipe.wheel.root, prefix)
        if problem:
            add("wheel.root", problem, f"the wheel root is a directory under {prefix}")
    return found


def _generator_problems(recipe: Recipe, root: Path) -> list[_Problem]:
    """A problem for each generator that is not a module of the project or of opforge with
    source files (what the build fingerprints)."""
    found = []
    for i, name in enumerate(recipe.generators):
        try:
            generator_files(name, root, f"{recipe.path}: generators[{i}]")
        except RecipeError as exc:
            found.append(_Problem(exc.message, exc.hint))
    return found


def _reference_problems(recipes: dict[str, Recipe], pins: PinSet) -> list[_Problem]:
    found: list[_Problem] = []
    for recipe in recipes.values():
        for i, pin in enumerate(recipe.pins):
            if pin not in pins.pins:
                found.append(
                    _Problem(
                        f"{recipe.path}: pins[{i}]: pin {pin!r} is not in {pins.path}",
                        f"add {pin!r} to {pins.path.name} or remove it from the recipe",
                    )
                )
        for i, dep in enumerate(recipe.depends_on):
            if dep not in recipes:
                found.append(
                    _Problem(
                        f"{recipe.path}: depends_on[{i}]: unknown recipe {dep!r}",
                        f"known recipes: {', '.join(sorted(recipes))}",
                    )
                )
        for i, requirement in enumerate(recipe.wheel.requires if recipe.wheel else ()):
            # It becomes a METADATA header: a line break would add headers of its own.
            problem = requirement_problem(requirement)
            if problem:
                found.append(
                    _Problem(
                        f"{recipe.path}: wheel.requires[{i}]: {requirement!r} {problem}",
                        "give one PEP 508 requirement per entry, e.g. torch or 'numpy<2'",
                    )
                )
            elif is_bare_name(requirement) and requirement not in recipe.python_packages:
                found.append(
                    _Problem(
                        f"{recipe.path}: wheel.requires[{i}]: {requirement!r} has no version and "
                        "is not in python_packages, so there is no built-against version to pin "
                        "it to",
                        f"add {requirement!r} to python_packages, or give a version "
                        f"({requirement}==X.Y or {requirement}<X)",
                    )
                )
    graph = {name: [d for d in r.depends_on if d in recipes] for name, r in recipes.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        found.append(
            _Problem(
                f"{recipes[cycle[0]].path}: depends_on: dependency cycle "
                f"{' -> '.join(reversed(cycle))}",
                "remove one of the depends_on entries in that cycle",
            )
        )
    return found


def _links_out(file: Path, root: Path) -> bool:
    """Whether ``file`` lies in project ``root`` but is a link (or under a linked folder) to a
    file outside it: the project's recipes, like its sources, are its own files
    (``link_problem``, the sources' check)."""
    if not file.absolute().is_relative_to(root.absolute()):
        return False
    return link_problem(root, file.absolute().relative_to(root.absolute()).as_posix()) is not None


def load_recipes(paths: list[Path], pins: PinSet, root: Path) -> RecipeBook:
    """Parse, validate and cross-check the recipe files at ``paths`` (files or directories).

    Every problem in every file is collected and reported together in one ``RecipeError``.
    """
    problems: list[_Problem] = []
    files: dict[Path, Path] = {}  # each file once, however often it is reached: by resolved path
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.yaml"))
            if not found:
                problems.append(_Problem(f"{path}: holds no recipe files (*.yaml)", _MISSING_HINT))
        elif path.is_file():
            found = [path]
        elif path.exists():
            problems.append(_Problem(f"{path}: not a regular file", _MISSING_HINT))
            continue
        else:
            problems.append(_Problem(f"{path}: no such recipe file or directory", _MISSING_HINT))
            continue
        for file in found:
            real = follow_links(file)
            if real is None:
                problems.append(
                    _Problem(f"{file}: a loop of symbolic links", "remove or repoint the link")
                )
                continue
            if _links_out(file, root):
                problems.append(
                    _Problem(
                        f"{file}: a link out of the project, to {real}",
                        "copy the recipe into the project, or give its path to "
                        "`opforge recipes validate` to check it",
                    )
                )
                continue
            files.setdefault(real, file)
    recipes: dict[str, Recipe] = {}
    for file in files.values():
        recipe = _read_recipe(file, problems)
        if recipe is None:
            continue
        if recipe.name in recipes:
            problems.append(
                _Problem(
                    f"{file}: name: {recipe.name!r} is already defined in "
                    f"{recipes[recipe.name].path}",
                    "each recipe needs a unique name",
                )
            )
            continue
        problems.extend(_path_problems(recipe, root))
        problems.extend(_generator_problems(recipe, root))
        recipes[recipe.name] = recipe
    problems.extend(_reference_problems(recipes, pins))
    _raise_if_any(problems)
    return RecipeBook(recipes)
