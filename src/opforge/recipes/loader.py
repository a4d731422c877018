"""Loading and validating recipes: schema, then cross-references (pins, dependencies, cycles)."""

from __future__ import annotations

import graphlib
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from opforge.errors import RecipeError
from opforge.pins.model import PinSet
from opforge.recipes.model import Recipe, recipe_from_dict
from opforge.recipes.schema import RECIPE_SCHEMA
from opforge.yamlfile import parse_yaml

_VALIDATOR = jsonschema.Draft202012Validator(RECIPE_SCHEMA)


def _key_path(parts: list) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _describe(error: jsonschema.ValidationError) -> tuple[str, str]:
    """A (key path, problem) pair for a schema error, in recipe-author terms."""
    where = list(error.absolute_path)
    schema = error.schema
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in allowed)
        if unknown and allowed:
            return _key_path([*where, unknown[0]]), (
                f"unknown key (allowed here: {', '.join(sorted(allowed))})"
            )
    if "propertyNames" in error.schema_path:
        # A bad mapping key is reported against its parent; point at the key itself.
        return _key_path([*where, error.instance]), (
            f"unknown name (allowed: {', '.join(schema['enum'])})"
        )
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return _key_path([*where, missing]), "required key is missing"
    if error.validator == "enum":
        return _key_path(
            where
        ), f"{error.instance!r} is not one of {', '.join(map(str, schema['enum']))}"
    if error.validator == "type":
        expected = schema["type"]
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return _key_path(where), f"expected {expected}, got {type(error.instance).__name__}"
    if error.validator == "pattern":
        return _key_path(where), f"{error.instance!r} must be lowercase letters, digits and '-'"
    return _key_path(where), error.message


def _best_error(raw: object) -> jsonschema.ValidationError | None:
    errors = sorted(_VALIDATOR.iter_errors(raw), key=lambda e: (len(e.absolute_path), e.message))
    if not errors:
        return None
    # Prefer an error from a real branch over the generic if/then wrapper.
    concrete = [e for e in errors if e.validator not in ("allOf", "if")]
    return (concrete or errors)[0]


def parse_recipe(path: Path) -> Recipe:
    """Read one recipe file and check it against the schema."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read: {exc.strerror}") from None
    raw = parse_yaml(path, text, RecipeError)
    if not isinstance(raw, dict):
        raise RecipeError(
            f"{path}: expected a mapping at the top level", hint="see recipes/kernels.yaml"
        )
    error = _best_error(raw)
    if error is not None:
        key, problem = _describe(error)
        raise RecipeError(f"{path}: {key}: {problem}", hint="see the recipe schema in README.md")
    return recipe_from_dict(path, raw)


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


def _check_references(recipes: dict[str, Recipe], pins: PinSet, root: Path) -> None:
    for recipe in recipes.values():
        for i, pin in enumerate(recipe.pins):
            if pin not in pins.pins:
                raise RecipeError(
                    f"{recipe.path}: pins[{i}]: pin {pin!r} is not in {pins.path}",
                    hint=f"add {pin!r} to {pins.path.name} or remove it from the recipe",
                )
        for i, dep in enumerate(recipe.depends_on):
            if dep not in recipes:
                raise RecipeError(
                    f"{recipe.path}: depends_on[{i}]: unknown recipe {dep!r}",
                    hint=f"known recipes: {', '.join(sorted(recipes))}",
                )
        for i, pattern in enumerate(recipe.sources):
            if not any(root.glob(pattern)):
                raise RecipeError(
                    f"{recipe.path}: sources[{i}]: {pattern!r} matches no file under {root}",
                    hint="source patterns are globs relative to the project root",
                )
        for i, requirement in enumerate(recipe.wheel.requires if recipe.wheel else ()):
            if is_bare_name(requirement) and requirement not in recipe.python_packages:
                raise RecipeError(
                    f"{recipe.path}: wheel.requires[{i}]: {requirement!r} has no version and is not "
                    "in python_packages, so there is no built-against version to pin it to",
                    hint=f"add {requirement!r} to python_packages, or give a version "
                    f"({requirement}==X.Y or {requirement}<X)",
                )
        if recipe.cmake and not (root / recipe.cmake.source_dir / "CMakeLists.txt").is_file():
            raise RecipeError(
                f"{recipe.path}: cmake.source_dir: {recipe.cmake.source_dir!r} has no CMakeLists.txt",
                hint="source_dir is relative to the project root",
            )
    graph = {name: list(r.depends_on) for name, r in recipes.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        first = recipes[cycle[0]]
        raise RecipeError(
            f"{first.path}: depends_on: dependency cycle {' -> '.join(reversed(cycle))}",
            hint="remove one of the depends_on entries in that cycle",
        ) from None


def load_recipes(paths: list[Path], pins: PinSet, root: Path) -> RecipeBook:
    """Parse, validate and cross-check the recipe files at ``paths`` (files or directories)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.yaml")))
        elif path.is_file():
            files.append(path)
        else:
            raise RecipeError(f"{path}: no such recipe file or directory")
    recipes: dict[str, Recipe] = {}
    for file in files:
        recipe = parse_recipe(file)
        if recipe.name in recipes:
            raise RecipeError(
                f"{file}: name: {recipe.name!r} is already defined in {recipes[recipe.name].path}",
                hint="each recipe needs a unique name",
            )
        recipes[recipe.name] = recipe
    _check_references(recipes, pins, root)
    return RecipeBook(recipes)
