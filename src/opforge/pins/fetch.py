"""Downloading pins: proxies, retries with backoff, Range resume, verify, then commit.

``requests`` with ``trust_env`` honours HTTP(S)_PROXY, NO_PROXY and REQUESTS_CA_BUNDLE, so a
corporate proxy and a TLS-intercepting CA need no opforge-specific setting here.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import requests
import urllib3
from tqdm import tqdm

from opforge.errors import DigestMismatch, OfflineMiss, PinError
from opforge.pins.cache import ContentCache
from opforge.pins.digest import hash_file
from opforge.pins.model import Pin

_PERMANENT_STATUS = {400, 401, 403, 404, 405, 410, 451}
_CHUNK = 1 << 20


class _Transient(Exception):
    """A failure worth retrying (connection lost, truncated body, 5xx)."""


class _Permanent(Exception):
    """A failure retrying cannot fix at this URL (404 and friends)."""


def progress_enabled(stream: object = sys.stderr) -> bool:
    """Progress bars only on an interactive terminal, never in CI logs."""
    if os.environ.get("CI") or os.environ.get("OPFORGE_NO_PROGRESS"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


@dataclass
class FetchSettings:
    """How hard to try: attempts per URL, backoff base (seconds) and socket timeout."""

    retries: int = 4
    backoff: float = 0.5
    timeout: float = 30.0
    progress: bool = False


class Fetcher:
    """Brings pins into a ``ContentCache``, downloading only what is not there yet."""

    def __init__(
        self,
        cache: ContentCache,
        *,
        offline: bool = False,
        settings: FetchSettings | None = None,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.cache = cache
        self.offline = offline
        self.settings = settings or FetchSettings()
        self.log = log
        self._local = threading.local()

    def _session(self) -> requests.Session:
        # requests.Session is not documented as thread-safe: one per worker thread.
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = "opforge-fetch"
            self._local.session = session
        return session

    def fetch(self, pin: Pin) -> Path:
        """Return the cached, verified file for ``pin``, downloading it if needed."""
        if self.cache.has(pin):
            return self.cache.path_for(pin)
        if self.offline:
            raise OfflineMiss(
                f"pin {pin.name}: not in cache {self.cache.root} and --offline was given",
                hint=f"run `opforge pins fetch {pin.name}` once with network access",
            )
        url, temp = self.download(pin)
        try:
            return self._verify_and_commit(pin, url, temp)
        finally:
            temp.unlink(missing_ok=True)

    def download(self, pin: Pin) -> tuple[str, Path]:
        """Download ``pin`` unverified into a temporary file; return the URL that served it.

        The caller owns the temporary file and must verify and commit it, or delete it.
        """
        failures: list[str] = []
        for url in pin.urls:
            temp = self.cache.new_temp(pin)
            try:
                self._download(pin, url, temp)
                return url, temp
            except (_Transient, _Permanent) as exc:
                temp.unlink(missing_ok=True)
                failures.append(f"{url}: {exc}")
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
        tried = "; ".join(failures)
        raise PinError(
            f"pin {pin.name}: download failed ({tried})",
            hint="check the URL and your network/proxy settings (HTTPS_PROXY, NO_PROXY), "
            "or add a mirror under `urls:`",
        )

    def fetch_many(self, pins: Sequence[Pin], jobs: int = 4) -> dict[str, Path]:
        """Fetch several pins in parallel; raises the first failure after all have finished."""
        results: dict[str, Path] = {}
        errors: list[PinError] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(self.fetch, pin): pin for pin in pins}
            for future, pin in futures.items():
                try:
                    results[pin.name] = future.result()
                except PinError as exc:
                    errors.append(exc)
        if errors:
            if len(errors) > 1:
                others = ", ".join(str(e).split(":", 1)[0] for e in errors[1:])
                errors[0].message += f" (also failed: {others})"
            raise errors[0]
        return results

    def _verify_and_commit(self, pin: Pin, url: str, temp: Path) -> Path:
        algorithms = ("sha256", "md5") if pin.md5 else ("sha256",)
        actual = hash_file(temp, algorithms)
        for algorithm in algorithms:
            expected = pin.sha256 if algorithm == "sha256" else pin.md5
            if actual[algorithm] != expected:
                raise DigestMismatch(
                    f"pin {pin.name}: {algorithm} mismatch for {url}: "
                    f"expected {expected}, got {actual[algorithm]}",
                    hint=f"if the new file is trusted, re-pin it with `opforge pins update {pin.name}`",
                )
        if pin.size is not None and temp.stat().st_size != pin.size:
            raise DigestMismatch(
                f"pin {pin.name}: size mismatch for {url}: expected {pin.size} bytes, "
                f"got {temp.stat().st_size}",
                hint=f"re-pin with `opforge pins update {pin.name}`",
            )
        return self.cache.commit(temp, pin)

    def _download(self, pin: Pin, url: str, temp: Path) -> None:
        last: Exception | None = None
        for attempt in range(self.settings.retries + 1):
            if attempt:
                time.sleep(self.settings.backoff * 2 ** (attempt - 1))
            try:
                self._attempt(pin, url, temp)
                return
            except _Transient as exc:
                last = exc
                self.log(f"{pin.name}: {exc}; retrying ({attempt + 1}/{self.settings.retries})")
        raise _Transient(f"{last} (gave up after {self.settings.retries + 1} attempts)")

    def _attempt(self, pin: Pin, url: str, temp: Path) -> None:
        have = temp.stat().st_size
        # identity: byte ranges must address the file itself, not a compressed rendering of it.
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with self._session().get(
                url, stream=True, timeout=self.settings.timeout, headers=headers
            ) as response:
                self._receive(pin, response, temp, have)
        except requests.exceptions.ConnectionError as exc:
            raise _Transient(_describe_connection_error(url, exc)) from None
        except requests.exceptions.Timeout:
            raise _Transient(f"timed out after {self.settings.timeout:g}s") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise _Transient(f"transfer interrupted ({type(exc).__name__})") from None

    def _receive(self, pin: Pin, response: requests.Response, temp: Path, have: int) -> None:
        status = response.status_code
        if status in _PERMANENT_STATUS or (400 <= status < 500 and status not in (408, 416, 429)):
            raise _Permanent(f"HTTP {status} {response.reason}")
        if status == 416 and have:
            # The server says our partial file already covers the whole resource.
            return
        if status >= 400:
            raise _Transient(f"HTTP {status} {response.reason}")
        resumed = status == 206 and have > 0
        if status == 206 and not resumed:
            raise _Transient("server sent a partial response to a full request")
        if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
            raise _Transient("server answered the resume with a different range")
        length = response.headers.get("Content-Length")
        expected_total = (int(length) + (have if resumed else 0)) if length else pin.size
        mode = "ab" if resumed else "wb"
        with (
            open(temp, mode) as out,
            tqdm(
                total=expected_total,
                initial=have if resumed else 0,
                unit="B",
                unit_scale=True,
                desc=pin.name,
                disable=not self.settings.progress,
                leave=False,
            ) as bar,
        ):
            # read1 hands over whatever has arrived, so a connection cut mid-transfer keeps every
            # byte received for the resume (iter_content's buffered reads would drop them).
            while chunk := response.raw.read1(_CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
        received = temp.stat().st_size
        if expected_total is not None and received < expected_total:
            raise _Transient(f"transfer cut off at {received} of {expected_total} bytes")


def _describe_connection_error(url: str, exc: Exception) -> str:
    text = str(exc)
    host = urlsplit(url).netloc
    if "ProxyError" in type(exc).__name__ or "Unable to connect to proxy" in text:
        return "cannot reach the proxy (check HTTP_PROXY/HTTPS_PROXY)"
    if "Connection refused" in text:
        return f"connection refused by {host}"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return f"host {host} not found"
    if "SSLError" in type(exc).__name__ or "CERTIFICATE_VERIFY_FAILED" in text:
        return f"TLS verification failed for {host} (set REQUESTS_CA_BUNDLE to your CA bundle)"
    if "IncompleteRead" in text or "Connection broken" in text:
        return "connection broken mid-transfer"
    return f"cannot connect to {host}"
