"""Masking credentials in URLs and proxy settings before anything is printed.

Credentials come in three shapes: ``scheme://user:password@host``, ``scheme://TOKEN@host`` (a
token in the user slot) and, in proxy variables, the same without a scheme
(``user:password@host:port``, ``TOKEN@host:port``, which requests and pip accept).
"""

from __future__ import annotations

import re

MASK = "***"

# userinfo runs to the last '@' before the host: a password may itself hold a raw '@', and
# raw '?' or '#' (which belong percent-encoded, but people paste them as they are); a query
# holding an '@' right after the host is masked too, which costs nothing but legibility.
_WITH_SCHEME = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/]*)@")
_NO_SCHEME = re.compile(r"(?<![\w.%+:/@-])(?P<user>[\w.%+-]+):(?P<password>[^\s/]*)@(?=[\w\[])")


def _masked_userinfo(userinfo: str) -> str:
    user, colon, _password = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK


def mask_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it masked (passwords and tokens; a user
    name that comes with a password stays, so one can tell whose credentials they were)."""
    text = _WITH_SCHEME.sub(lambda m: f"{m['scheme']}{_masked_userinfo(m['userinfo'])}@", text)
    return _NO_SCHEME.sub(lambda m: f"{m['user']}:{MASK}@", text)


def mask_url(value: str) -> str:
    """One URL or proxy setting, scheme optional, with any credentials in it masked."""
    if "://" in value:
        return mask_credentials(value)
    userinfo, at, host = value.rpartition("@")
    if not at or "/" in userinfo:
        return value
    return f"{_masked_userinfo(userinfo)}@{host}"
