"""Ends a build step's processes when the opforge that started them dies without ending them
(``kill -9``, the OOM killer): cmake, ninja and the compilers would otherwise build on into a
tree nobody owns, until ninja next wrote to its closed pipe.

``python -m opforge.build.orphan_guard SESSION`` reads its stdin to the end. opforge holds the
other end and, once the step is over, writes ``DONE``; an end of input without it means opforge
is gone, and the step's session is stopped as opforge would have stopped it.
"""

from __future__ import annotations

import sys

from opforge.build.sessions import stop_session

DONE = b"done"
GRACE_S = 5.0


def main(argv: list[str]) -> int:
    """Wait for opforge's word or its end; stop the session in the second case."""
    session = int(argv[0])
    if sys.stdin.buffer.read() != DONE:
        stop_session(session, GRACE_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
