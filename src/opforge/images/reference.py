"""Docker image references: the repository a reference names, without its tag or digest."""

from __future__ import annotations


def repository(reference: str) -> str:
    """``reference`` without its tag and digest: ``registry.example:5000/nvidia/cuda:12.4.1``
    gives ``registry.example:5000/nvidia/cuda``.

    A tag is a colon in the last path component; a colon before the last ``/`` is the registry's
    port and stays.
    """
    name = reference.partition("@")[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


def pinned(reference: str, digest: str) -> str:
    """``reference``'s repository at ``digest`` (``name@sha256:...``): what a ``FROM`` pins."""
    return f"{repository(reference)}@{digest}"
