"""The JSON Schema ``ci/matrix.yaml`` must satisfy, and its first problem in matrix terms.

Each schema below says, in its ``description``, the form it expects; a problem names the key
and that form. Versions are quoted strings: YAML reads an unquoted 9.10 as the number 9.1. An
optional key given as null counts as absent.
"""

from __future__ import annotations

import re

import jsonschema

AXES = ("cuda", "cudnn", "framework")

# jsonschema searches patterns with Python's re, where `$` also matches before a final newline:
# `\Z` is the true end.
_CUDA = {
    "type": "string",
    "pattern": "^[0-9]+(\\.[0-9]+)*\\Z",
    "description": 'a CUDA version in quotes, e.g. "13.0"',
}
_CUDNN = {
    "type": "string",
    "pattern": "^[0-9]+(\\.[0-9]+)*\\Z",
    "description": 'a cuDNN version in quotes, e.g. "9.10"',
}
_TEXT = {"type": "string", "description": "a string"}
# Runner labels land in the workflow's `runs-on:`: printable ASCII without spaces.
_LABEL = {
    "type": "string",
    "pattern": "^[!-~]+\\Z",
    "description": "a runner label (printable ASCII, no spaces), e.g. gpu",
}
_MATCH_VALUE = {
    "anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1}],
    "description": 'a quoted value or a non-empty list of them, e.g. "12.4" or ["12.4", "13.0"]',
}

MATRIX_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["cuda", "frameworks"],
    "description": "a mapping with `cuda:` and `frameworks:` (and optionally `runner:`, "
    "`exclude:`, `ci_cell:`)",
    "properties": {
        "runner": {
            "type": ["array", "null"],
            "items": _LABEL,
            "minItems": 1,
            "description": "a non-empty list of runner labels, e.g. [self-hosted, gpu]",
        },
        "cuda": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": _CUDA,
            "additionalProperties": {
                "type": "array",
                "items": _CUDNN,
                "minItems": 1,
                "uniqueItems": True,
                "description": 'a non-empty list of cuDNN versions, e.g. ["8.9", "9.10"]',
            },
            "description": 'a mapping of CUDA versions to cuDNN lists, e.g. {"13.0": ["9.13"]}',
        },
        "frameworks": {
            "type": "array",
            "minItems": 1,
            "description": "a non-empty list of {requirement: ..., with: [...]} entries",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["requirement"],
                "description": 'a mapping such as {requirement: "torch==2.13.0"}',
                "properties": {
                    "requirement": {
                        "type": "string",
                        "description": 'a quoted requirement, e.g. "torch==2.13.0", or "none"',
                    },
                    "with": {
                        "type": ["array", "null"],
                        "items": {
                            "type": "string",
                            "description": 'a quoted requirement, e.g. "numpy<2"',
                        },
                        "description": 'a list of requirements, e.g. ["numpy<2"]',
                    },
                },
            },
        },
        "exclude": {
            "type": ["array", "null"],
            "description": "a list of {match: ..., reason: ...} entries",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["match", "reason"],
                "description": 'a mapping such as {match: {cuda: "12.4"}, reason: "..."}',
                "properties": {
                    "match": {
                        "type": "object",
                        "minProperties": 1,
                        "propertyNames": {
                            "enum": list(AXES),
                            "description": f"an axis ({', '.join(AXES)})",
                        },
                        "additionalProperties": _MATCH_VALUE,
                        "description": 'a mapping of axes to values, e.g. {cuda: "12.4"}',
                    },
                    "reason": {
                        "type": "string",
                        "pattern": "\\S",
                        "description": "a reason saying why the cells cannot run",
                    },
                },
            },
        },
        "ci_cell": {
            "type": ["string", "null"],
            "description": "a cell id from `opforge ci list`",
        },
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(MATRIX_SCHEMA)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+\Z")
# A wrong value is quoted in the error; a whole mapping given by mistake is cut short.
_SHOWN = 60


def _key_path(data: object, parts: list) -> str:
    """``exclude[0].match.cuda``: list positions in brackets, mapping keys after dots (quoted
    when they are not plain, so the error stays on one line)."""
    text, node = "", data
    for part in parts:
        if isinstance(node, list):
            text += f"[{part}]"
        else:
            key = part if isinstance(part, str) and _PLAIN_KEY.match(part) else repr(part)
            text += f".{key}" if text else key
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None  # a missing key: the last part of the path
    return text or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _describe(data: object, error: jsonschema.ValidationError) -> str:
    """``key: problem`` for one schema error."""
    where = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        unknown = next(k for k in error.instance if k not in allowed)
        key = _key_path(data, [*where, unknown])
        return f"{key}: unknown key (allowed here: {', '.join(allowed)})"
    if "propertyNames" in error.schema_path:
        # A bad mapping key is reported against its mapping; point at the key itself.
        key = _key_path(data, [*where, error.instance])
        return f"{key}: the key must be {error.schema['description']}"
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        return f"{_key_path(data, [*where, missing])}: required key is missing"
    if error.validator == "uniqueItems":
        items = error.instance
        twice = next(v for i, v in enumerate(items) if v in items[:i])
        return f"{_key_path(data, where)}: {twice!r} is listed twice"
    expected = error.schema.get("description", error.message)
    return f"{_key_path(data, where)}: expected {expected}, got {_shown(error.instance)}"


def schema_problem(data: object) -> str | None:
    """The first problem (``key: what is wrong``) of the parsed matrix ``data`` against the
    schema, by key; ``None`` when it passes."""
    problems = sorted(_describe(data, e) for e in _VALIDATOR.iter_errors(data))
    return problems[0] if problems else None
