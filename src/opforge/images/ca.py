"""Reading the extra CA bundle an image build trusts (``--extra-ca``, ``$OPFORGE_EXTRA_CA``).

The bundle must be a regular file of at most ``MAX_CA_BYTES``: a device (``/dev/zero``), a FIFO
or a huge file would otherwise be read without bound. Even the full Mozilla bundle a Debian
system carries is about 220 KB, so the limit leaves ample room for a corporate bundle.
"""

from __future__ import annotations

import os
import re
import ssl
import stat
from pathlib import Path

from opforge.errors import ConfigError

MAX_CA_BYTES = 2 << 20
_HINT = "pass a PEM file with --extra-ca, or set OPFORGE_EXTRA_CA"


def _variable_hint(origin: str) -> str | None:
    """The hint for a bundle an environment variable named (the user may not know it is set),
    or None for one a flag named."""
    return None if origin.startswith("--") else f"fix or unset {origin}, or pass --extra-ca"


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``, fewer only at its end."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_ca_bundle(path: Path, origin: str = "--extra-ca") -> bytes:
    """The bytes of the PEM bundle at ``path``; anything else is a one-line ``ConfigError``
    naming ``origin``, the flag or environment variable that gave the path."""
    from_variable = _variable_hint(origin)
    named = f"extra CA bundle {path}" + (f" (from ${origin})" if from_variable else "")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{named}: {exc.strerror}", hint=from_variable or _HINT) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{named} is not a regular file", hint=from_variable or _HINT)
        data = _read_at_most(fd, MAX_CA_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{named}: {exc.strerror}", hint=from_variable or _HINT) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CA_BYTES:
        raise ConfigError(
            f"{named} is larger than {MAX_CA_BYTES >> 20} MiB, the limit for a CA bundle",
            hint=from_variable
            or "give the PEM file of the CA certificates to trust, not another file",
        )
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise ConfigError(
            f"{named} holds no PEM certificate",
            hint=from_variable or "give a PEM bundle, e.g. /etc/ssl/certs/ca-certificates.crt",
        )
    problem = _unloadable(data)
    if problem is not None:
        # Else the image build fails on it much later, inside update-ca-certificates.
        raise ConfigError(
            f"{named} holds a certificate OpenSSL cannot load ({problem})",
            hint=from_variable or "give a PEM bundle, e.g. /etc/ssl/certs/ca-certificates.crt",
        )
    return data


_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL
)


def _unloadable(data: bytes) -> str | None:
    """Why OpenSSL refuses a certificate of the PEM bundle ``data``, or None. Only the
    certificate blocks are given to it: a bundle's comments may be UTF-8 (a CA's name) and its
    first bytes a BOM, which ``cadata`` does not take."""
    for block in _PEM_CERTIFICATE.findall(data):
        try:
            ssl.create_default_context(cadata=block.decode("ascii"))
        except UnicodeDecodeError:
            return "a certificate block holds characters other than base64"
        except (ssl.SSLError, ValueError, TypeError) as exc:
            return str(getattr(exc, "reason", None) or exc).splitlines()[0][:120]
    return None
