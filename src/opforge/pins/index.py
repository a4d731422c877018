"""Asking a Python package index (PEP 691 JSON simple API) for the digest it publishes."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from opforge.errors import PinError
from opforge.pins.fetch import DocumentUnavailable, Fetcher
from opforge.pins.model import Pin
from opforge.redact import mask_credentials

PYPI_SIMPLE = "https://pypi.org/simple"
_PYPI_FILE_HOSTS = {"files.pythonhosted.org"}
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# PyPI's page for a project with thousands of files (torch) is a few MB.
_MAX_PAGE_BYTES = 64 << 20


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


def published_sha256(pin: Pin, index: str, fetcher: Fetcher) -> str:
    """The sha256 the index lists for ``pin``'s file, asked through ``fetcher`` (its proxies,
    time budget and per-read timeout); raises when it lists none."""
    project = project_of(pin.filename)
    url = f"{index}/{project}/"
    shown = mask_credentials(url)
    try:
        status, body = fetcher.get_document(url, _SIMPLE_JSON, _MAX_PAGE_BYTES)
    except DocumentUnavailable as exc:
        raise PinError(
            f"pin {pin.name}: cannot ask the package index {shown} ({exc})",
            hint="the index must answer to confirm the new digest; check network/proxy settings",
        ) from None
    if status != 200:
        raise PinError(
            f"pin {pin.name}: package index {shown} answered HTTP {status}",
            hint="check the pin's `index:` URL",
        )
    digests = _listed_sha256(body)
    if digests is None:
        raise PinError(
            f"pin {pin.name}: {shown} did not answer with the PEP 691 JSON simple API",
            hint="point `index:` at a simple index that supports JSON (PyPI and devpi do)",
        )
    if pin.filename in digests:
        return digests[pin.filename]
    raise PinError(
        f"pin {pin.name}: the index {shown} lists no sha256 for {pin.filename}",
        hint="check that the URL is the index's own file URL",
    )


def _listed_sha256(body: bytes) -> dict[str, str] | None:
    """File name to sha256 (lower case) of a PEP 691 project page; None when ``body`` is not
    one. Files listed with no sha256 are left out."""
    try:
        files = json.loads(body)["files"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, list):
        return None
    digests = {}
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("hashes", {}), dict):
            return None
        name, digest = entry.get("filename"), entry.get("hashes", {}).get("sha256")
        if isinstance(name, str) and isinstance(digest, str) and digest:
            digests[name] = digest.lower()
    return digests
