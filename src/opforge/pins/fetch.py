"""Downloading pins: proxies, retries with backoff, Range resume, bounds, verify, then commit.

``requests`` with ``trust_env`` honours HTTP(S)_PROXY, NO_PROXY and REQUESTS_CA_BUNDLE, so a
corporate proxy and a TLS-intercepting CA need no opforge-specific setting here.

Every download is bounded: in time (a budget per file, retries included, besides the per-read
socket timeout) and in bytes (the pin's recorded size, else a cap), so a trickling or endless
server ends in an error naming the pin instead of a hang or a full disk. An interrupted
``fetch_many`` cuts the connections of its downloads, so a silent server cannot hold it up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from tqdm import tqdm
from urllib3.connection import HTTPConnection, HTTPSConnection

from opforge.errors import ConfigError, DigestMismatch, OfflineMiss, PinError
from opforge.pins.cache import CacheState, ContentCache
from opforge.pins.digest import hash_file
from opforge.pins.model import Pin
from opforge.proxies import proxy_in_use, proxy_problem
from opforge.redact import mask_credentials, mask_url
from opforge.settings import ca_bundle_problem

_PERMANENT_STATUS = {400, 401, 403, 404, 405, 410, 451}
_CHUNK = 1 << 20
# HTTP's Content-Length is ASCII digits; str.isdigit also takes '²', which int() refuses.
_LENGTH = re.compile(r"[0-9]+")


class _Transient(Exception):
    """A failure worth retrying (connection lost, truncated body, 5xx)."""


class _Permanent(Exception):
    """A failure retrying cannot fix at this URL (404 and friends, a body over the size limit)."""


class _Untrusted(_Permanent):
    """The server's certificate was refused: nothing is wrong with what was received before,
    which stays for a resume once the certificate is trusted."""


class _OutOfTime(Exception):
    """The file's time budget is spent; no further attempt or URL is tried."""


class DocumentUnavailable(Exception):
    """A page (``Fetcher.get_document``) could not be read whole; the message says why."""


class _WriteFailed(Exception):
    """The partial file could not be written (disk full, read-only); carries the OSError."""


def progress_enabled(allowed: bool, stream: object = sys.stderr) -> bool:
    """Progress bars only where the settings allow them (never in CI logs) and on an
    interactive terminal."""
    return allowed and bool(getattr(stream, "isatty", lambda: False)())


@dataclass
class FetchSettings:
    """How hard to try and how far: retries per URL, backoff base (s), per-read socket timeout
    (s), the total time budget per file (s), and the byte cap for pins with no recorded size;
    the spelling each proxy variable is set in, for errors naming it."""

    retries: int = 4
    backoff: float = 0.5
    timeout: float = 30.0
    deadline: float = 1800.0
    max_bytes: int = 4 << 30
    progress: bool = False
    ca_bundle: str | None = None
    proxy_spellings: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError(
                f"retries must be 0 or more, got {self.retries}", hint="e.g. --retries 4"
            )
        if not self.deadline > 0:
            raise ConfigError(
                f"the download time budget must be positive, got {self.deadline}",
                hint="e.g. --deadline 1800",
            )
        if self.max_bytes <= 0:
            raise ConfigError(
                f"the download size cap must be positive, got {self.max_bytes}",
                hint="e.g. --max-bytes 4294967296",
            )


class _Stopped(Exception):
    """The download was stopped because the fetch it belongs to was interrupted."""


class _OpenConnections:
    """The sockets the downloads have open, so that an interrupted fetch can cut them: a worker
    blocked reading a silent server would otherwise hold the interrupt up for the whole read
    timeout. A socket opened after the cut is cut at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # A duplicate of each connection's socket: TLS takes the original over (detaching it)
        # during the handshake, but a shutdown through any descriptor cuts the connection.
        self._open: weakref.WeakKeyDictionary[HTTPConnection, socket.socket] = (
            weakref.WeakKeyDictionary()
        )
        self._opened_by: weakref.WeakKeyDictionary[HTTPConnection, int] = (
            weakref.WeakKeyDictionary()
        )
        self._cut = False

    def add(self, connection: HTTPConnection, sock: socket.socket) -> None:
        with self._lock:
            handle = sock.dup()
            self._open[connection] = handle
            self._opened_by[connection] = threading.get_ident()
            if self._cut:
                _shut(handle)

    def drop(self, connection: HTTPConnection) -> None:
        with self._lock:
            handle = self._open.pop(connection, None)
        if handle is not None:
            handle.close()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for handle in self._open.values():
                _shut(handle)

    def cut_thread(self, ident: int) -> None:
        """Cut the connections thread ``ident`` opened (one download out of time)."""
        with self._lock:
            for connection, handle in self._open.items():
                if self._opened_by.get(connection) == ident:
                    _shut(handle)

    def pool_classes(self) -> dict[str, type[urllib3.HTTPConnectionPool]]:
        """urllib3 pool classes whose connections register their sockets here."""
        connections = self

        # _new_conn is urllib3's hook for the socket (SOCKS overrides it too): registering
        # there covers the wait for a proxy's CONNECT answer and the TLS handshake as well.
        class Tracked(HTTPConnection):
            def _new_conn(self) -> socket.socket:
                sock = super()._new_conn()
                connections.add(self, sock)
                return sock

            def close(self) -> None:
                connections.drop(self)
                super().close()

        class TrackedTLS(Tracked, HTTPSConnection):
            pass

        class Pool(urllib3.HTTPConnectionPool):
            ConnectionCls = Tracked

        class TLSPool(urllib3.HTTPSConnectionPool):
            ConnectionCls = TrackedTLS

        return {"http": Pool, "https": TLSPool}


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes a read blocked on the socket in another thread.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _CuttableAdapter(HTTPAdapter):
    """requests' adapter, with connections made through ``_OpenConnections``' pool classes,
    direct or through an http(s) proxy (SOCKS keeps its own pools, uncut)."""

    def __init__(self, pool_classes: dict[str, type[urllib3.HTTPConnectionPool]]) -> None:
        self._pool_classes = pool_classes
        super().__init__()

    def init_poolmanager(self, *args: object, **kwargs: object) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: object) -> urllib3.PoolManager:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, urllib3.ProxyManager):
            manager.pool_classes_by_scheme = self._pool_classes
        return manager


class _Budget:
    """The time left for one file, shared by all its attempts and URLs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def check(self) -> None:
        if self.left() <= 0:
            raise _OutOfTime()

    def sleep(self, seconds: float, stop: threading.Event) -> None:
        """Wait ``seconds`` (a retry's back-off), or until ``stop`` is set."""
        if seconds >= self.left():
            stop.wait(max(0.0, self.left()))
            raise _OutOfTime()
        if stop.wait(seconds):
            raise _Stopped()

    def timeout(self, per_read: float) -> float:
        self.check()
        return min(per_read, self.left())


class Fetcher:
    """Brings pins into a ``ContentCache``, downloading only what is not there yet."""

    def __init__(
        self,
        cache: ContentCache,
        *,
        offline: bool = False,
        settings: FetchSettings | None = None,
        log: Callable[[str], None] = lambda _msg: None,
        fetch_command: Callable[[str], str] = lambda name: (
            f"opforge pins fetch {shlex.quote(name)}"
        ),
    ) -> None:
        self.cache = cache
        self.offline = offline
        # The command a hint gives for fetching one pin, with the caller's own project, pins
        # file and cache.
        self.fetch_command = fetch_command
        self.settings = settings or FetchSettings()
        self.log = log
        self._local = threading.local()
        # Set when fetch_many is interrupted: downloads in flight stop at their next chunk or,
        # blocked on a silent server, when their connection is cut (their partial files stay
        # for a resume) instead of running to the end.
        self._stopping = threading.Event()
        self._connections = _OpenConnections()
        self._pool_classes = self._connections.pool_classes()
        # The pins whose files this fetcher downloaded (the others came from the cache).
        self.downloaded: set[str] = set()

    def _session(self) -> requests.Session:
        # requests.Session is not documented as thread-safe: one per worker thread.
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = "opforge-fetch"
            adapter = _CuttableAdapter(self._pool_classes)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._local.session = session
        return session

    def _say(self, message: str) -> None:
        self.log(mask_credentials(message))

    @contextlib.contextmanager
    def _cut_when_out_of_time(self, budget: _Budget) -> Iterator[None]:
        """Cut this thread's connections when ``budget`` runs out, and raise ``_OutOfTime``: a
        server trickling its headers (or a body of no announced length) never lets a read time
        out, and the body's loop checks the budget only between chunks."""
        ident = threading.get_ident()
        spent = threading.Event()

        def cut() -> None:
            spent.set()
            self._connections.cut_thread(ident)

        timer = threading.Timer(max(0.0, budget.left()), cut)
        timer.daemon = True
        timer.start()
        try:
            yield
        except Exception:
            if spent.is_set():
                raise _OutOfTime() from None  # the failure was the cut's
            raise
        finally:
            timer.cancel()
        if spent.is_set():
            raise _OutOfTime()  # the body "ended" at the cut

    def get_document(self, url: str, accept: str, max_bytes: int) -> tuple[int, bytes]:
        """The HTTP status and whole body of ``url`` (a package index's page), bounded as a
        download is: the per-read timeout, the time budget (``deadline``) and ``max_bytes``;
        raises ``DocumentUnavailable`` saying why there is none."""
        budget = _Budget(self.settings.deadline)
        body = bytearray()
        try:
            with (
                self._cut_when_out_of_time(budget),
                self._session().get(
                    url,
                    stream=True,
                    timeout=budget.timeout(self.settings.timeout),
                    headers={"Accept": accept},
                ) as response,
            ):
                for chunk in response.iter_content(_CHUNK):
                    body += chunk
                    if len(body) > max_bytes:
                        raise DocumentUnavailable(f"it sent more than {max_bytes} bytes")
                    budget.check()
                return response.status_code, bytes(body)
        except _OutOfTime:
            raise DocumentUnavailable(
                f"no whole answer within {self.settings.deadline:g} s (--deadline)"
            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise DocumentUnavailable(_describe_connection_error(url, exc, self.settings)) from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise DocumentUnavailable(type(exc).__name__) from None

    def fetch(self, pin: Pin) -> Path:
        """Return the cached file for ``pin``, verified now, downloading it if needed.

        The cached copy is re-verified on every call; a bad one is removed and downloaded again
        (with ``offline``, that is an error naming the removed file).
        """
        cached = self._verified(pin)
        if cached is not None:
            return cached
        if self.offline:
            raise OfflineMiss(
                f"pin {pin.name}: not in cache {self.cache.root} and --offline was given",
                hint=f"run `{self.fetch_command(pin.name)}` once with network access",
            )
        waiting = f"{pin.name}: another opforge process is downloading it; waiting"
        with self.cache.partial(
            pin, self.settings.deadline, lambda: self._say(waiting), self._pause
        ) as temp:
            # It may have arrived while we waited for the other process.
            cached = self._verified(pin)
            if cached is not None:
                return cached
            path = self._download_and_commit(pin, temp)
            self.downloaded.add(pin.name)
            return path

    def _pause(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise _Stopped()

    def _verified(self, pin: Pin) -> Path | None:
        result = self.cache.verify(pin)
        if result.state is CacheState.OK:
            return self.cache.path_for(pin)
        if result.state is CacheState.CORRUPT:
            where = self.cache.path_for(pin)
            if self.offline:
                raise OfflineMiss(
                    f"pin {pin.name}: cached file {where} was corrupt ({result.problem}) and has "
                    "been removed; --offline was given, so it was not downloaded again",
                    hint=f"run `{self.fetch_command(pin.name)}` once with network access",
                )
            self._say(
                f"{pin.name}: cached file {where} was corrupt ({result.problem}); "
                "removed it, downloading again"
            )
        return None

    def _download_and_commit(self, pin: Pin, temp: Path) -> Path:
        resumed_at = temp.stat().st_size
        if resumed_at:
            self._say(f"{pin.name}: resuming an interrupted download at byte {resumed_at}")
        budget = _Budget(self.settings.deadline)
        mismatches: list[DigestMismatch] = []
        urls = pin.urls
        while urls:
            url = self._download_into(pin, temp, self._limit(pin), urls, budget)
            try:
                return self._verify_and_commit(pin, url, temp)
            except DigestMismatch as exc:
                os.truncate(temp, 0)
                if resumed_at:
                    # The earlier partial may have come from a different file: this URL again,
                    # from scratch.
                    resumed_at = 0
                    self._say(
                        f"{pin.name}: the resumed download does not match; downloading it "
                        "from the start"
                    )
                    continue
                mismatches.append(exc)
                urls = urls[urls.index(url) + 1 :]
                if urls:
                    self._say(f"{exc}; trying the next URL")
        temp.unlink()
        if len(mismatches) > 1:
            mismatches[
                0
            ].message += f" (and the other {len(mismatches) - 1} URL(s) served no match)"
        raise mismatches[0]

    def _limit(self, pin: Pin) -> int:
        return pin.size if pin.size is not None else self.settings.max_bytes

    def download(self, pin: Pin) -> tuple[str, Path]:
        """Download ``pin`` unverified into a fresh temporary file; return the URL that served it.

        For ``pins update``: the file may have changed since it was pinned, so no earlier partial
        is resumed and the recorded size is not a limit (the byte cap is). The caller owns the
        temporary file and must verify and commit it, or delete it.
        """
        temp = self.cache.new_temp()
        try:
            return self._download_into(pin, temp, self.settings.max_bytes), temp
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _download_into(
        self,
        pin: Pin,
        temp: Path,
        limit: int,
        urls: Sequence[str] | None = None,
        budget: _Budget | None = None,
    ) -> str:
        """Fill ``temp`` from the first of ``urls`` (all of ``pin``'s by default) that serves it,
        within ``budget`` (a fresh one by default); return that URL."""
        budget = budget or _Budget(self.settings.deadline)
        failures: list[str] = []
        for i, url in enumerate(urls or pin.urls):
            if i:
                _empty(temp)  # a mirror starts from scratch
            try:
                self._download(pin, url, temp, limit, budget)
                return url
            except _Transient as exc:
                failures.append(f"{url}: {exc}")
            except _Permanent as exc:
                if not isinstance(exc, _Untrusted):
                    _empty(temp)
                failures.append(f"{url}: {exc}")
            except _OutOfTime:
                raise PinError(
                    mask_credentials(
                        f"pin {pin.name}: download from {url} ran out of its time budget: "
                        f"{budget.elapsed():.1f} s elapsed of {self.settings.deadline:g} s, "
                        f"{temp.stat().st_size} bytes received"
                    ),
                    hint="raise the budget with --deadline SECONDS if the network is just slow; "
                    "what was received is kept and resumed next time",
                ) from None
            except _WriteFailed as exc:
                error = exc.args[0]
                _empty(temp)  # free the space the partial took
                raise PinError(
                    f"pin {pin.name}: cannot write the download to {temp.parent}: {error.strerror}",
                    hint="free space there, or pass --cache DIR on a disk with room",
                ) from None
        tried = "; ".join(failures)
        raise PinError(
            mask_credentials(f"pin {pin.name}: download failed ({tried})"),
            hint="check the URL and your network/proxy settings (HTTPS_PROXY, NO_PROXY), "
            "or add a mirror under `urls:`",
        )

    def fetch_many(self, pins: Sequence[Pin], jobs: int = 4) -> dict[str, Path]:
        """Fetch several pins in parallel; raises the first failure after all have finished."""
        results: dict[str, Path] = {}
        errors: list[PinError] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            try:
                # Submitted inside the try: a Ctrl-C between two submissions stops the first too.
                futures = {pool.submit(self.fetch, pin): pin for pin in pins}
                for future, pin in futures.items():
                    try:
                        results[pin.name] = future.result()
                    except PinError as exc:
                        errors.append(exc)
            except BaseException:
                # Ctrl-C (or any failure here): stop the workers rather than wait for whole files
                # or a silent server; they unwind at once, removing what they must.
                self._stopping.set()
                self._connections.cut()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        if errors:
            if len(errors) > 1:
                others = ", ".join(str(e).split(":", 1)[0] for e in errors[1:])
                errors[0].message += f" (also failed: {others})"
            raise errors[0]
        return results

    def _verify_and_commit(self, pin: Pin, url: str, temp: Path) -> Path:
        algorithms = ("sha256", "md5") if pin.md5 else ("sha256",)
        actual = hash_file(temp, algorithms)
        shown = mask_credentials(url)
        for algorithm in algorithms:
            expected = pin.sha256 if algorithm == "sha256" else pin.md5
            if actual[algorithm] != expected:
                raise DigestMismatch(
                    f"pin {pin.name}: {algorithm} mismatch for {shown}: "
                    f"expected {expected}, got {actual[algorithm]}",
                    hint=f"if the new file is trusted, re-pin it with `opforge pins update {pin.name}`",
                )
        if pin.size is not None and temp.stat().st_size != pin.size:
            raise DigestMismatch(
                f"pin {pin.name}: size mismatch for {shown}: expected {pin.size} bytes, "
                f"got {temp.stat().st_size}",
                hint=f"re-pin with `opforge pins update {pin.name}`",
            )
        return self.cache.commit(temp, pin)

    def _download(self, pin: Pin, url: str, temp: Path, limit: int, budget: _Budget) -> None:
        problem = ca_bundle_problem(self.settings.ca_bundle)
        if problem is not None:
            # requests would refuse each attempt, before connecting, with an OSError.
            raise PinError(
                mask_credentials(f"pin {pin.name}: cannot download {url}: CA bundle {problem}"),
                hint="point REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) at a CA bundle file or "
                "directory, or unset it; `opforge doctor` shows the one in use",
            )
        self._check_proxy(pin, url)
        retries = self.settings.retries
        last: Exception | None = None
        for attempt in range(retries + 1):
            if attempt:
                budget.sleep(self.settings.backoff * 2 ** (attempt - 1), self._stopping)
            try:
                self._attempt(pin, url, temp, limit, budget)
                return
            except _Transient as exc:
                if self._stopping.is_set():
                    raise _Stopped() from None  # the failure was the interrupt's own cut
                last = exc
                if attempt < retries:
                    self._say(f"{pin.name}: {exc}; retrying ({attempt + 1}/{retries})")
        attempts = f"{retries + 1} attempt" + ("s" if retries else "")
        raise _Transient(f"{last} (gave up after {attempts})")

    def _check_proxy(self, pin: Pin, url: str) -> None:
        """``PinError`` when the proxy requests would use for ``url`` is malformed: requests
        fails such a setting on each attempt with an error that names neither it nor why."""
        used = proxy_in_use(url, self.settings.proxy_spellings)
        if used is None:
            return
        name, value = used
        problem = proxy_problem(value)
        if problem is not None:
            raise PinError(
                mask_credentials(
                    f"pin {pin.name}: cannot download {url}: proxy {name}={mask_url(value)} "
                    f"is unusable: {problem}"
                ),
                hint=f"fix {name} (e.g. http://proxy.example:3128) or unset it; "
                "`opforge doctor` checks the proxy settings",
            )

    def _attempt(self, pin: Pin, url: str, temp: Path, limit: int, budget: _Budget) -> None:
        have = temp.stat().st_size
        if have > limit:
            os.truncate(temp, 0)
            have = 0
        # identity: byte ranges must address the file itself, not a compressed rendering of it.
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        timeout = budget.timeout(self.settings.timeout)
        try:
            with (
                self._cut_when_out_of_time(budget),
                self._session().get(url, stream=True, timeout=timeout, headers=headers) as response,
            ):
                self._receive(pin, response, temp, have, limit, budget)
        except requests.exceptions.TooManyRedirects:
            raise _Permanent("redirect loop (more than 30 redirects)") from None
        except requests.exceptions.InvalidSchema:
            raise _Permanent("redirected to a URL that is not http:// or https://") from None
        except (requests.exceptions.InvalidURL, urllib3.exceptions.LocationValueError):
            raise _Permanent("not a valid URL (the pin's, or one it redirected to)") from None
        except requests.exceptions.ConnectionError as exc:
            budget.check()
            described = _describe_connection_error(url, exc, self.settings)
            if _UNTRUSTED in str(exc):
                raise _Untrusted(described) from None  # no retry makes it one to trust
            raise _Transient(described) from None
        except (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError):
            budget.check()
            raise _Transient(f"timed out after {timeout:g}s") from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError) as exc:
            budget.check()
            raise _Transient(f"transfer interrupted ({type(exc).__name__})") from None

    def _receive(
        self,
        pin: Pin,
        response: requests.Response,
        temp: Path,
        have: int,
        limit: int,
        budget: _Budget,
    ) -> None:
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
        start = have if resumed else 0
        what = (
            f"the pinned size of {limit} bytes"
            if limit == pin.size
            else f"the {limit} byte cap for a pin with no size (--max-bytes)"
        )
        length = response.headers.get("Content-Length", "")
        # A length that is not a number is no length: the body runs until the server closes.
        announced = _LENGTH.fullmatch(length) is not None
        expected_total = start + int(length) if announced else pin.size
        if announced and expected_total > limit:
            raise _Permanent(f"the server announced {expected_total} bytes, more than {what}")
        try:
            out = open(temp, "ab" if resumed else "wb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise _WriteFailed(exc) from None
        received = start
        with (
            out,
            tqdm(
                total=expected_total,
                initial=start,
                unit="B",
                unit_scale=True,
                desc=pin.name,
                disable=not self.settings.progress,
                leave=False,
            ) as bar,
        ):
            # read1 hands over whatever has arrived, so a connection cut mid-transfer keeps every
            # byte received for the resume (iter_content's buffered reads would drop them). One
            # byte more than the limit allows is asked for, to tell "exactly" from "too much".
            try:
                while chunk := response.raw.read1(min(_CHUNK, limit - received + 1)):
                    if self._stopping.is_set():
                        raise _Stopped()
                    if received + len(chunk) > limit:
                        raise _Permanent(f"the server sent more than {what}; stopped there")
                    try:
                        out.write(chunk)
                        out.flush()
                    except OSError as exc:
                        raise _WriteFailed(exc) from None
                    received += len(chunk)
                    bar.update(len(chunk))
                    budget.check()
            except urllib3.exceptions.ProtocolError:
                # urllib3's IncompleteRead: the line ended before the announced length.
                raise _Transient(_closed_early(response, received, expected_total)) from None
        if self._stopping.is_set():
            raise _Stopped()  # the end was the interrupt's cut, not the end of the file
        if expected_total is not None and received < expected_total:
            raise _Transient(_closed_early(response, received, expected_total))


def _empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.truncate(path, 0)


def _host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


def _closed_early(response: requests.Response, received: int, total: int | None) -> str:
    of = f" of {total}" if total is not None else ""
    return f"{_host(response.url)} closed the connection after {received}{of} bytes"


def _untrusted(url: str, error: str, ca_bundle: str | None) -> str:
    """Why a server's certificate was refused, in OpenSSL's words (expired, another host's);
    where no CA vouches for it, the CA bundle in use, or the system's, lacks the one that
    signed it (a TLS-intercepting network's own, say)."""
    host = _host(url)
    reason = error.partition("certificate verify failed: ")[2].partition(" (_ssl")[0].strip()
    if reason and not any(cause in reason for cause in _NO_ISSUER):
        return f"TLS verification failed for {host}: {reason}"
    if ca_bundle:
        return (
            f"TLS verification failed for {host}: the CA bundle {ca_bundle} "
            "(REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE) holds no CA that signed its certificate"
        )
    return (
        f"TLS verification failed for {host} (set REQUESTS_CA_BUNDLE to a bundle holding "
        "your network's CA)"
    )


# OpenSSL's reasons for a certificate no trusted CA signed.
_NO_ISSUER = ("unable to get local issuer", "self-signed", "self signed")


# requests' words for a server certificate that failed verification.
_UNTRUSTED = "CERTIFICATE_VERIFY_FAILED"


def _describe_connection_error(url: str, exc: Exception, settings: FetchSettings) -> str:
    text = str(exc)
    host = _host(url)
    if "ProxyError" in type(exc).__name__ or "Unable to connect to proxy" in text:
        used = proxy_in_use(url, settings.proxy_spellings)
        if used is None:
            return "cannot reach the proxy (check HTTP_PROXY/HTTPS_PROXY)"
        name, value = used
        return f"cannot reach the proxy {name}={mask_url(value)} (check it, or unset it)"
    if "Connection refused" in text:
        return f"connection refused by {host}"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return f"host {host} not found"
    if _UNTRUSTED in text:
        return _untrusted(url, text, settings.ca_bundle)
    if "SSLError" in type(exc).__name__:
        return f"TLS verification failed for {host} (set REQUESTS_CA_BUNDLE to your CA bundle)"
    if "IncompleteRead" in text or "Connection broken" in text:
        return "connection broken mid-transfer"
    if "Connection reset" in text or "ConnectionResetError" in text:
        return f"connection reset by {host}"
    if "BadStatusLine" in text:
        return f"{host} answered, but not in HTTP"
    if "LineTooLong" in text or "got more than" in text:
        return f"{host} sent a header line over the length HTTP clients accept"
    if "RemoteDisconnected" in text:
        return f"{host} closed the connection without an answer"
    return f"cannot connect to {host}"
