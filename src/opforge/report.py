"""How every opforge entry point prints a user error: one line, then its hint."""

from __future__ import annotations

import sys

from opforge.errors import OpforgeError
from opforge.redact import mask_credentials


def report(exc: OpforgeError) -> None:
    """Print ``exc`` to stderr as every opforge entry point does: ``opforge: error:`` and its
    one line, then its hint, credentials in URLs masked."""
    print(f"opforge: error: {mask_credentials(exc.message)}", file=sys.stderr, flush=True)
    if exc.hint:
        print(f"  hint: {mask_credentials(exc.hint)}", file=sys.stderr, flush=True)
