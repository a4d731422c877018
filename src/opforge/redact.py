"""Masking credentials in URLs and proxy settings before anything is printed.

Credentials come in three shapes: ``scheme://user:password@host``, ``scheme://TOKEN@host`` (a
token in the user slot) and, in proxy variables, the same without a scheme
(``user:password@host:port``, ``TOKEN@host:port``).
"""

from __future__ import annotations

import re
from itertools import pairwise

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

MASK = "***"

_SCHEME = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://")
# urllib3's authority ends at the first of these; what follows is the path, query or fragment.
_AUTHORITY = re.compile(r"[^\\/?#]*")
_WORD = re.compile(r"\S*")
# Not after '//': ``scheme://`` is no ``user:`` (URLs with a scheme are masked first).
_NO_SCHEME = re.compile(r"(?<![\w.%+:/@-])(?P<user>[\w.%+-]+):(?!//)(?P<password>\S*)@(?=[\w\[])")


def _masked_userinfo(userinfo: str) -> str:
    user, colon, _password = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK


def _parses_as_host(hostport: str) -> bool:
    try:
        parse_url(f"http://{hostport}")
    except LocationParseError:
        return False
    return True


def _userinfo_length(rest: str, *, in_text: bool) -> int | None:
    """How many characters of ``rest`` (what follows ``scheme://``) are userinfo, or None.

    The authority is split as urllib3 splits it, so a password requests would send is masked
    wherever it ends. Where urllib3 cannot parse the authority (``user:pa/ss@host``: a raw '/',
    '?', '#' or, in running text, a space in the password), the value was meant as credentials
    all the same, and everything up to the last '@' is masked: a secret shown is worse than a
    URL made illegible.
    """
    token = _WORD.match(rest).group() if in_text else rest
    authority = _AUTHORITY.match(token).group()
    userinfo, at, hostport = authority.rpartition("@")
    if _parses_as_host(hostport):
        return len(userinfo) if at else None
    if "@" in token:
        return token.rfind("@")
    if not in_text:
        return None
    # Running text ends a URL at a space; a password may hold one: the next word with an '@'.
    for word in re.finditer(r"\S+", rest[len(token) :]):
        if "@" in word.group():
            return len(token) + word.start() + word.group().rfind("@")
    return None


def _mask_after_scheme(rest: str, *, in_text: bool) -> str:
    length = _userinfo_length(rest, in_text=in_text)
    if length is None:
        return rest
    return f"{_masked_userinfo(rest[:length])}{rest[length:]}"


def mask_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it masked (passwords and tokens; a user
    name that comes with a password stays, so one can tell whose credentials they were)."""
    starts = list(_SCHEME.finditer(text))
    pieces = [text[: starts[0].start()] if starts else text]
    for match, following in pairwise([*starts, None]):
        stop = following.start() if following else len(text)
        # A URL's userinfo is looked for up to the next URL or the end of its line.
        newline = text.find("\n", match.end(), stop)
        end = stop if newline == -1 else newline
        pieces += [
            match.group(),
            _mask_after_scheme(text[match.end() : end], in_text=True),
            text[end:stop],
        ]
    masked = _NO_SCHEME.sub(lambda m: f"{m['user']}:{MASK}@", "".join(pieces))
    return _SECRET_PARAMETER.sub(lambda m: f"{m['name']}{MASK}", masked)


# A query parameter that carries a secret: a signed mirror URL's token, an S3 presigned URL's
# X-Amz-Signature and X-Amz-Credential, an API key.
_SECRET_PARAMETER = re.compile(
    r"(?P<name>[?&][\w.-]*(?:token|key|secret|passw(?:or)?d|pwd|sig|signature|credential|auth)"
    r"[\w.-]*=)[^&#\s]+",
    re.IGNORECASE,
)


def mask_url(value: str) -> str:
    """One URL or proxy setting, scheme optional, with any credentials in it masked (the whole
    value is one URL: a space in it is part of the password, as urllib3 reads it)."""
    scheme = _SCHEME.match(value)
    if scheme is None:
        if "://" in value:
            return mask_credentials(value)
        return _mask_after_scheme(value, in_text=False)
    return scheme.group() + _mask_after_scheme(value[scheme.end() :], in_text=False)
