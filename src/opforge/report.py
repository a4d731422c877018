"""How every opforge entry point prints a user error: one line, then its hint."""

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


def report(exc: OpforgeError) -> None:
    """Print ``exc`` to stderr as every opforge entry point does: ``opforge: error:`` and its
    one line, then its hint, credentials in URLs masked, very long words cut short."""
    print(f"opforge: error: {shorten(mask_credentials(exc.message))}", file=sys.stderr, flush=True)
    if exc.hint:
        print(f"  hint: {shorten(mask_credentials(exc.hint))}", file=sys.stderr, flush=True)
