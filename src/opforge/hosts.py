"""Host names as the IDNA codec of requests' connections takes them."""

from __future__ import annotations


def host_name_problem(host: str) -> str | None:
    """Why the IDNA codec refuses ``host`` as a name, or None. It refuses an empty part and one
    over 63 characters (more than DNS allows), in words blaming the URL fetched. An IPv6 literal
    (with ``:``) is no name and passes."""
    if ":" in host:
        return None
    try:
        host.encode("idna")
    except UnicodeError:
        return "has an empty part or one over 63 characters"
    return None
