"""The JSON Schema every recipe file must satisfy before anything runs."""

from __future__ import annotations

PROFILES = ("cpu", "gpu")
IMAGE_FAMILIES = ("devel", "runtime")
KINDS = ("cmake",)
TOOLS = ("cmake", "ninja", "c++", "nvcc")

_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"}
_OPTIONS = {
    "type": "object",
    "additionalProperties": {"type": ["string", "boolean", "integer"]},
}

RECIPE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "kind", "sources", "image", "profiles", "outputs"],
    "properties": {
        "name": _NAME,
        "kind": {"enum": list(KINDS)},
        "description": {"type": "string"},
        "sources": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "pins": {"type": "array", "items": {"type": "string"}},
        "image": {"enum": list(IMAGE_FAMILIES)},
        "depends_on": {"type": "array", "items": _NAME},
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
                    "requires": {"type": "array", "items": {"enum": list(TOOLS)}},
                    "outputs": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "outputs": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "python_packages": {"type": "array", "items": {"type": "string"}},
        # Python modules (of the interpreter running opforge) that generate part of the target's
        # code during its build; their source is part of the target's input fingerprint.
        "generators": {"type": "array", "items": {"type": "string"}},
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
            "required": ["command", "image"],
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "image": {"enum": list(IMAGE_FAMILIES)},
            },
        },
    },
    "allOf": [
        {
            "if": {"properties": {"kind": {"const": "cmake"}}},
            "then": {"required": ["cmake"]},
        }
    ],
}
