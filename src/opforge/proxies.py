"""The proxy settings of this environment: as build arguments and container environment, and
checked the way requests will read them for downloads."""

from __future__ import annotations

import importlib.util
import ipaddress
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from requests.utils import get_environ_proxies, prepend_scheme_if_needed
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from opforge.hosts import host_name_problem

PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")
#: The variables requests reads for an http(s) download (FTP_PROXY only reaches containers).
DOWNLOAD_PROXY_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
# requests sends through http(s) proxies itself, and through SOCKS ones with PySocks installed.
_PROXY_SCHEMES = ("http", "https", "socks4", "socks4a", "socks5", "socks5h")
_PORT = re.compile(r":(\d+)$")


def _setting(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """The variable that sets proxy ``name`` and its value: the lower-case spelling wins, as
    urllib (so requests) reads them, where it holds a value. An empty one counts as unset
    here: a devcontainer passes both spellings, one of them empty, and means the other."""
    lower = name.lower()
    if environ.get(lower):
        return lower, environ[lower]
    return (name, environ[name]) if environ.get(name) else None


def proxy_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Every proxy variable set in ``environ``, under both spellings (apt reads lower case, pip
    either), each with the value downloads here use."""
    found: dict[str, str] = {}
    for name in PROXY_NAMES:
        setting = _setting(environ, name)
        if setting is not None:
            found[name] = found[name.lower()] = setting[1]
    return found


def proxy_conflicts(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The proxy variables whose two spellings disagree, each said with the one that counts."""
    return tuple(
        f"{name.lower()} and {name} differ ({name.lower()} is the one used)"
        for name in PROXY_NAMES
        if environ.get(name.lower())
        and environ.get(name)
        and environ[name.lower()] != environ[name]
    )


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


def proxy_problem(value: str) -> str | None:
    """Why requests cannot use ``value`` (a proxy variable's setting) as a proxy, or None.

    requests puts ``http://`` before a value that has no scheme, but reads a leading
    ``word:`` as one (``alice:pw@proxy:3128`` has the scheme ``alice``). The problems never
    quote the value: it may hold a password.
    """
    if not value.strip():
        return "blank"
    try:
        parsed = parse_url(prepend_scheme_if_needed(value, "http"))
    except LocationParseError:
        return _unparsable(value)
    scheme = (parsed.scheme or "").lower()
    if scheme not in _PROXY_SCHEMES:
        if "://" not in value:
            return "with no scheme, requests reads what comes before ':' as one; write http:// in front"
        return f"scheme {scheme}:// is not one requests can use (http, https, socks5)"
    if scheme.startswith("socks") and importlib.util.find_spec("socks") is None:
        return "a SOCKS proxy needs PySocks, which is not installed (pip install 'requests[socks]')"
    if not parsed.host:
        return "no host in it"
    problem = host_name_problem(parsed.host)
    return None if problem is None else f"its host name {problem}"


def _unparsable(value: str) -> str:
    hostport = value.partition("://")[2] or value
    hostport = re.split(r"[/?#]", hostport.rpartition("@")[2])[0]
    port = _PORT.search(hostport)
    if port and int(port.group(1)) > 65535:
        return f"port {port.group(1)} is out of range (0-65535)"
    return (
        "not a URL requests can parse (expected http://host:port, a user name and password "
        "before the host, a '/', '?' or '#' in the password percent-encoded)"
    )


def proxy_spellings(environ: Mapping[str, str]) -> dict[str, str]:
    """The spelling each proxy variable set in ``environ`` is read in (``HTTP_PROXY`` ->
    ``http_proxy`` where the lower case one holds the value)."""
    return {
        name: setting[0] for name in PROXY_NAMES if (setting := _setting(environ, name)) is not None
    }


def proxy_in_use(url: str, spellings: Mapping[str, str]) -> tuple[str, str] | None:
    """The variable (in its spelling, ``spellings``) and the setting of the proxy requests will
    use for ``url``, as requests itself reads them from the environment (lower case first,
    ``<scheme>_proxy`` before ``all_proxy``, NO_PROXY exempting hosts); None when no proxy
    applies."""
    proxies = get_environ_proxies(url, no_proxy=None)
    scheme = urlsplit(url).scheme.lower()
    for key in (scheme, "all"):
        if proxies.get(key):
            name = f"{key.upper()}_PROXY"
            return spellings.get(name, name), proxies[key]
    return None
