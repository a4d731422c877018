"""The JSON Schema every recipe file must satisfy before anything runs."""

from __future__ import annotations

# The recipe format this opforge reads: a recipe says `schema: 1`; another number is refused.
SCHEMA_VERSIONS = (1,)
# Keys recipes once had that nothing honoured, and what to do instead.
REMOVED_KEYS = {
    "kind": "every recipe is built with CMake (its `cmake:` section); remove the key",
    "image": "the image comes from `--flavour/--cuda/--cudnn` (devel builds, runtime tests); "
    "remove the key",
    "test.image": "recipe tests run in the runtime image (`opforge test --runner docker`); "
    "remove the key",
}
PROFILES = ("cpu", "gpu")
TOOLS = ("cmake", "ninja", "c++", "nvcc")

# A name becomes directory and wheel names: at most 64 characters. jsonschema searches patterns
# with Python's re, where `$` also matches before a final newline: `\\Z` is the true end.
_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,63}\\Z"}
# A distribution name as PEP 508 spells it: what importlib.metadata can look a package up by.
_DISTRIBUTION = {
    "type": "string",
    "pattern": "^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])\\Z",
}
# What each pattern asks for, in recipe-author terms (the loader's error messages).
PATTERN_RULES = {
    _NAME["pattern"]: "up to 64 lowercase letters, digits and '-', starting with a letter",
    _DISTRIBUTION["pattern"]: "a Python distribution name (letters, digits, '.', '_' and '-', "
    "starting and ending with a letter or digit), e.g. torch",
}
# YAML keys may be numbers or null (`1: a`, `~: a`); a CMake variable name is text.
_OPTIONS = {
    "type": "object",
    "propertyNames": {"type": "string"},
    "additionalProperties": {"type": ["string", "boolean", "integer"]},
}


def _names(items: dict) -> dict:
    """A list of names, each at most once (a name twice is a slip, never a second meaning)."""
    return {"type": "array", "items": items, "uniqueItems": True}


RECIPE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema", "name", "sources", "cmake", "profiles", "outputs"],
    "properties": {
        "schema": {"enum": list(SCHEMA_VERSIONS)},
        "name": _NAME,
        "description": {"type": "string"},
        "sources": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "pins": _names({"type": "string"}),
        "depends_on": _names(_NAME),
        "cmake": {
            "type": "object",
            "additionalProperties": False,
            "required": ["source_dir"],
            "properties": {
                "source_dir": {"type": "string"},
                "options": _OPTIONS,
            },
        },
        "profiles": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": list(PROFILES)},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "options": _OPTIONS,
                    "requires": _names({"enum": list(TOOLS)}),
                    "outputs": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "outputs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "python_packages": _names(_DISTRIBUTION),
        # Python modules (of the interpreter running opforge) that generate part of the target's
        # code during its build; their source is part of the target's input fingerprint.
        "generators": _names({"type": "string"}),
        "wheel": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "root"],
            "properties": {
                "name": _NAME,
                "root": {"type": "string"},
                "requires": {"type": "array", "items": {"type": "string"}},
            },
        },
        "test": {
            "type": "object",
            "additionalProperties": False,
            "required": ["command"],
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
    },
}
