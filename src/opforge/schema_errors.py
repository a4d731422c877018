"""A JSON Schema validator's errors as ``where: what`` lines, in the terms of the file's author.

``where`` is a key path: list positions in brackets, mapping keys after dots
(``exclude[0].match.cuda``). ``what`` uses the failing schema's ``description`` when it has one
(the form expected there); otherwise it is worded from the schema's structure (types, names
allowed, the rules behind patterns).
"""

from __future__ import annotations

from collections.abc import Mapping

import jsonschema
from jsonschema.protocols import Validator

# What YAML reads a mapping key as, when that is not text (`1:`, `~:`, `true:`).
_YAML_KINDS = {int: "a number", float: "a number", bool: "a boolean", type(None): "null"}
# A wrong value is quoted in the error; a whole mapping given by mistake is cut short.
_SHOWN = 60


def key_text(key: object) -> str:
    """A mapping key as an error line shows it: as written when it is printable text, else
    quoted, so that a key holding a line break cannot split the one-line error."""
    return key if isinstance(key, str) and key.isprintable() and key.strip() else repr(key)


def key_path(data: object, parts: list) -> str:
    """``exclude[0].match.cuda``: the path ``parts`` into ``data``, a position in a list in
    brackets and a mapping key after a dot (a YAML key read as a number, ``1:``, is a key, so
    ``.1``, never ``[1]``)."""
    text, node = "", data
    for part in parts:
        if isinstance(node, list):
            text += f"[{part}]"
        else:
            text += f".{key_text(part)}" if text else key_text(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None  # a missing key: the last part of the path
    return text or "(top level)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _bad_key(data: object, where: list, error: jsonschema.ValidationError) -> tuple[str, str]:
    """A mapping key its ``propertyNames`` refuse (reported against the mapping): point at it."""
    schema = error.schema
    if "description" in schema:
        return key_path(data, [*where, error.instance]), f"the key must be {schema['description']}"
    if "enum" in schema:
        allowed = ", ".join(map(str, schema["enum"]))
        return key_path(data, [*where, error.instance]), f"unknown name (allowed: {allowed})"
    kind = _YAML_KINDS.get(type(error.instance), type(error.instance).__name__)
    return (
        key_path(data, where),
        f"key {error.instance!r} is {kind} in YAML, not a name; write the name as text "
        "(quoted if YAML would read it as a number or null)",
    )


def _wrong_value(error: jsonschema.ValidationError, patterns: Mapping[str, str]) -> str:
    """What is wrong with a value the schema refuses."""
    schema, value = error.schema, error.instance
    if "description" in schema:
        return f"expected {schema['description']}, got {_shown(value)}"
    if error.validator == "enum":
        return f"{value!r} is not one of {', '.join(map(str, schema['enum']))}"
    if error.validator == "type":
        expected = schema["type"]
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return f"expected {expected}, got {type(value).__name__}"
    if error.validator == "pattern" and schema["pattern"] in patterns:
        return f"{value!r} must be {patterns[schema['pattern']]}"
    return error.message


def describe(
    data: object, error: jsonschema.ValidationError, patterns: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(key path, problem) pairs for one error of ``data``; ``patterns`` words a ``pattern``
    the schema does not describe (its rule, e.g. "a Python distribution name")."""
    where = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        unknown = sorted((k for k in error.instance if k not in allowed), key=str)
        if unknown and allowed:
            listed = ", ".join(sorted(allowed))
            return [
                (key_path(data, [*where, k]), f"unknown key (allowed here: {listed})")
                for k in unknown
            ]
    if "propertyNames" in error.schema_path:
        return [_bad_key(data, where, error)]
    if error.validator == "required":
        # jsonschema gives one error per missing key and names it only in its message: each
        # names every missing key, and the set in schema_problems keeps each once.
        return [
            (key_path(data, [*where, k]), "required key is missing")
            for k in error.validator_value
            if k not in error.instance
        ]
    if error.validator == "uniqueItems":
        items = error.instance
        twice = next(v for i, v in enumerate(items) if v in items[:i])
        # YAML reads an unquoted 9.10 as the number 9.1, which then appears twice.
        quote = " (YAML reads unquoted 9.10 as 9.1: quote versions)" if type(twice) is float else ""
        return [(key_path(data, where), f"{twice!r} is listed twice{quote}")]
    return [(key_path(data, where), _wrong_value(error, patterns or {}))]


def schema_problems(
    validator: Validator,
    data: object,
    patterns: Mapping[str, str] | None = None,
) -> list[str]:
    """Every problem of ``data`` against ``validator``'s schema, as ``key: what is wrong``, each
    once and sorted by key (so the first is the same on every run); empty when it passes."""
    return sorted(
        {
            f"{where}: {problem}"
            for error in validator.iter_errors(data)
            for where, problem in describe(data, error, patterns)
        }
    )
