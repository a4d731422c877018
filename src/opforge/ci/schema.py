"""The JSON Schema ``ci/matrix.yaml`` must satisfy, and its first problem in matrix terms.

Each schema below says, in its ``description``, the form it expects; a problem names the key
and that form. Versions are quoted strings: YAML reads an unquoted 9.10 as the number 9.1. An
optional key given as null counts as absent.
"""

from __future__ import annotations

import jsonschema

from opforge.schema_errors import schema_problems

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


def schema_problem(data: object) -> str | None:
    """The first problem (``key: what is wrong``) of the parsed matrix ``data`` against the
    schema, by key; ``None`` when it passes."""
    problems = schema_problems(_VALIDATOR, data)
    return problems[0] if problems else None
