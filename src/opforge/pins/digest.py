"""File hashing, tuned for large downloads (one pass, large reads, all digests at once)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

# 4 MiB reads: big enough that syscall overhead vanishes next to SHA-NI hashing (~1.7 GB/s),
# small enough to stay in L2/L3 while each hash consumes it.
_CHUNK = 4 << 20


def hash_file(path: Path, algorithms: Iterable[str] = ("sha256",)) -> dict[str, str]:
    """Hex digests of ``path`` for each algorithm named, reading the file once."""
    with open(path, "rb", buffering=0) as f:
        return hash_stream(f, algorithms)


def hash_stream(stream: BinaryIO, algorithms: Iterable[str] = ("sha256",)) -> dict[str, str]:
    """Hex digests of what is left to read in ``stream`` (an unbuffered binary file)."""
    hashers = {name: hashlib.new(name) for name in algorithms}
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    while n := stream.readinto(buf):
        chunk = view[:n]
        for h in hashers.values():
            h.update(chunk)
    return {name: h.hexdigest() for name, h in hashers.items()}


def hash_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
