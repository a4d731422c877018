"""How every opforge entry point prints a user error: one line, any lines of detail (a failed
command's last output lines), then its hint."""

from __future__ import annotations

import re
import sys

from opforge.errors import OpforgeError
from opforge.redact import mask_credentials

# A word longer than this in an error is an argument or value echoed back (a path is at most
# 4096 bytes, but rarely over a few hundred): shown in part, so the error stays one readable line.
_LONG_WORD = 300
_KEPT = 120


def shorten(text: str) -> str:
    """``text`` with each run of more than ``_LONG_WORD`` non-space characters cut to its first
    ``_KEPT`` and a count of the whole."""
    return re.sub(
        rf"\S{{{_LONG_WORD + 1},}}",
        lambda m: f"{m.group()[:_KEPT]}... ({len(m.group())} characters)",
        text,
    )


def printable(text: str) -> str:
    """``text`` as it may reach a terminal or a markdown table: every character that is not
    printable (a line break in $OPFORGE_CACHE, an escape sequence in a file name, a right-to-left
    override) written as its code, so an echoed value can neither drive the terminal nor break
    the line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def error_line(text: str) -> str:
    """``text`` as one line of an error: credentials in URLs masked, unprinted characters
    escaped, very long words cut short."""
    return shorten(printable(mask_credentials(text)))


def report(exc: OpforgeError) -> None:
    """Print ``exc`` to stderr as every opforge entry point does: ``opforge: error:`` and its
    message on one line (a line break in an echoed value is shown as ``\\n``), its lines of
    detail, then its hint."""
    lines = [f"opforge: error: {error_line(exc.message)}", *map(error_line, exc.details)]
    if exc.hint:
        lines.append(f"  hint: {error_line(exc.hint)}")
    print("\n".join(lines), file=sys.stderr, flush=True)
