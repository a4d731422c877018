"""Asking a Python package index (PEP 691 JSON simple API) for the digest it publishes."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import requests

from opforge.errors import PinError
from opforge.pins.model import Pin
from opforge.redact import mask_credentials

PYPI_SIMPLE = "https://pypi.org/simple"
_PYPI_FILE_HOSTS = {"files.pythonhosted.org"}
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def index_for(pin: Pin) -> str | None:
    """The simple index that serves ``pin``'s file, if it is a package index's file."""
    if pin.index:
        return pin.index.rstrip("/")
    if urlsplit(pin.urls[0]).hostname in _PYPI_FILE_HOSTS:
        return PYPI_SIMPLE
    return None


def project_of(filename: str) -> str:
    """The normalised (PEP 503) project name of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        name = filename.split("-", 1)[0]
    else:
        stem = re.sub(r"\.(tar\.gz|tar\.bz2|zip|tgz)$", "", filename)
        name = stem.rsplit("-", 1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def published_sha256(pin: Pin, index: str, timeout: float = 30.0) -> str:
    """The sha256 the index lists for ``pin``'s file; raises when it lists none."""
    project = project_of(pin.filename)
    url = f"{index}/{project}/"
    shown = mask_credentials(url)
    try:
        response = requests.get(url, headers={"Accept": _SIMPLE_JSON}, timeout=timeout)
    except requests.exceptions.RequestException as exc:
        raise PinError(
            f"pin {pin.name}: cannot ask the package index {shown} ({type(exc).__name__})",
            hint="the index must answer to confirm the new digest; check network/proxy settings",
        ) from None
    if response.status_code != 200:
        raise PinError(
            f"pin {pin.name}: package index {shown} answered HTTP {response.status_code}",
            hint="check the pin's `index:` URL",
        )
    try:
        files = response.json()["files"]
    except (ValueError, KeyError, TypeError):
        raise PinError(
            f"pin {pin.name}: {shown} did not answer with the PEP 691 JSON simple API",
            hint="point `index:` at a simple index that supports JSON (PyPI and devpi do)",
        ) from None
    for entry in files:
        if entry.get("filename") == pin.filename:
            digest = entry.get("hashes", {}).get("sha256")
            if digest:
                return str(digest)
    raise PinError(
        f"pin {pin.name}: the index {shown} lists no sha256 for {pin.filename}",
        hint="check that the URL is the index's own file URL",
    )
