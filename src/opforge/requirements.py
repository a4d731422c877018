"""What may be written into a wheel's METADATA: one-line values and PEP 508 requirements.

Recipes are checked against it when they load, wheels when they are packed.
"""

from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement


def has_control_character(value: str) -> bool:
    """Whether ``value`` holds an ASCII control character (C0 or DEL)."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)


def one_line(value: str) -> bool:
    """Whether ``value`` can be a METADATA header value: no line break of any kind (the email
    parser splits on more than ``\\n``) and no control character."""
    return value.splitlines() == [value] and not has_control_character(value)


def requirement_problem(text: str) -> str | None:
    """Why ``text`` cannot be a ``Requires-Dist`` value (``None`` when it can): it must be one
    PEP 508 requirement on one line, so nothing can add headers to the wheel's METADATA."""
    if not text.strip():
        return "is empty"
    if not one_line(text):
        return "contains a line break or control character"
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        return f"is not a PEP 508 requirement ({str(exc).splitlines()[0]})"
    return None
