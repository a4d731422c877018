"""The last lines of a command's output, kept while it streams, for its error message."""

from __future__ import annotations

import collections

TAIL_LINES = 25


class LogTail:
    """Keeps the last ``size`` lines fed to it."""

    def __init__(self, size: int = TAIL_LINES) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=size)

    def add(self, line: str) -> None:
        """Keep ``line`` (without its newline), dropping the oldest beyond the size."""
        self._lines.append(line.rstrip("\n"))

    def details(self, title: str) -> list[str]:
        """An error's lines of detail: ``title`` (say where the lines come from), then the kept
        lines under it."""
        return [f"  {title}:", *(f"    {line}" for line in self._lines)]
