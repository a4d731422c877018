"""The proxy settings of this environment, as build arguments and container environment."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")


def proxy_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Every proxy variable set in ``environ``, under both spellings (apt reads lower case, pip
    either)."""
    found: dict[str, str] = {}
    for name in PROXY_NAMES:
        value = environ.get(name) or environ.get(name.lower())
        if value:
            found[name] = value
            found[name.lower()] = value
    return found


def uses_loopback(proxies: Mapping[str, str]) -> bool:
    """Whether a proxy listens on this host's loopback: containers reach it only on the host
    network (127.0.0.1 inside a bridged container is the container itself)."""
    for name, value in proxies.items():
        if name.upper() == "NO_PROXY":
            continue
        host = urlsplit(value if "://" in value else f"http://{value}").hostname or ""
        if host == "localhost":
            return True
        try:
            if ipaddress.ip_address(host).is_loopback:
                return True
        except ValueError:
            continue
    return False
