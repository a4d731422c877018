"""Fetching pins from a real loopback HTTP server: verify, cache, resume, retry, proxy."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from opforge.doctor import _ca_bundle, proxies_check
from opforge.errors import ConfigError, DigestMismatch, OfflineMiss, PinError
from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher, FetchSettings
from opforge.pins.model import Pin, load_pins
from opforge.proxies import proxy_conflicts, proxy_environment, proxy_spellings
from opforge.settings import ca_bundle_problem
from tests.conftest import run_opforge, sha256, write_pins

BODY = os.urandom(300_000)


def _pin(name: str, *urls: str, body: bytes = BODY, **extra) -> Pin:
    return Pin(name, tuple(urls), sha256(body), **extra)


def _cache_files(cache: ContentCache) -> list[str]:
    return sorted(str(p.relative_to(cache.root)) for p in cache.root.rglob("*") if p.is_file())


def test_fetch_stores_verified_file_under_its_digest(file_server, fetcher, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    path = fetcher.fetch(pin)
    assert path == cache.root / "sha256" / pin.sha256[:2] / pin.sha256
    assert path.read_bytes() == BODY
    assert not path.stat().st_mode & stat.S_IWUSR, "cached files are read-only"
    assert _cache_files(cache) == [f"sha256/{pin.sha256[:2]}/{pin.sha256}"]


def test_second_fetch_is_served_from_cache_without_a_request(file_server, fetcher):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    fetcher.fetch(pin)
    fetcher.fetch(pin)
    assert len(file_server.requests_for("/blob.bin")) == 1


def test_digest_mismatch_names_pin_url_digests_and_repin_command(file_server, fetcher, cache):
    url = file_server.add("/blob.bin", BODY)
    wrong = hashlib.sha256(b"something else").hexdigest()
    pin = Pin("icu4j", (url,), wrong)
    with pytest.raises(DigestMismatch) as info:
        fetcher.fetch(pin)
    message = str(info.value)
    assert "icu4j" in message and url in message
    assert wrong in message and sha256(BODY) in message
    assert "opforge pins update icu4j" in info.value.hint
    assert _cache_files(cache) == [], "nothing unverified may stay in the cache"


def test_legacy_md5_is_verified_too(file_server, fetcher, cache):
    url = file_server.add("/blob.bin", BODY)
    good = _pin("blob", url, md5=hashlib.md5(BODY).hexdigest())
    assert fetcher.fetch(good).read_bytes() == BODY
    bad = Pin("legacy", (url,), sha256(BODY) + "", md5="0" * 32)
    cache2 = ContentCache(cache.root.parent / "cache2")
    with pytest.raises(DigestMismatch, match="md5 mismatch"):
        Fetcher(cache2).fetch(bad)
    assert _cache_files(cache2) == []


def test_size_mismatch_is_refused(file_server, fetcher, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY), size=len(BODY) + 1)
    with pytest.raises(DigestMismatch, match="size mismatch"):
        fetcher.fetch(pin)
    assert _cache_files(cache) == []


def test_truncated_transfer_resumes_with_range(file_server, fetcher):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, cut_first=1))
    assert fetcher.fetch(pin).read_bytes() == BODY
    requests_seen = file_server.requests_for("/blob.bin")
    assert len(requests_seen) == 2
    assert requests_seen[0][2] is None
    assert requests_seen[1][2] == f"bytes={len(BODY) // 2}-", "the retry resumes where it stopped"


def test_truncated_transfer_without_range_support_restarts(file_server, fetcher):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, cut_first=1, ranges=False))
    assert fetcher.fetch(pin).read_bytes() == BODY
    assert len(file_server.requests_for("/blob.bin")) == 2


def test_server_errors_are_retried_with_backoff(file_server, fetcher):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, fail_first=2))
    assert fetcher.fetch(pin).read_bytes() == BODY
    assert len(file_server.requests_for("/blob.bin")) == 3


def test_persistent_truncation_gives_up_with_a_clear_error(file_server, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, cut_first=100, ranges=False))
    quick = Fetcher(cache, settings=FetchSettings(retries=2, backoff=0.0, timeout=5))
    with pytest.raises(PinError, match=r"pin blob: download failed .*gave up after 3 attempts"):
        quick.fetch(pin)
    assert _cache_files(cache) == [f"tmp/{pin.sha256}.part"], (
        "nothing unverified under sha256/; what arrived is kept in tmp/ to resume next time"
    )


def test_404_is_one_clear_error_and_not_retried(file_server, fetcher, cache):
    url = file_server.url("/missing.bin")
    with pytest.raises(PinError) as info:
        fetcher.fetch(_pin("gone", url))
    assert str(info.value) == f"pin gone: download failed ({url}: HTTP 404 Not Found)"
    assert "\n" not in str(info.value)
    assert len(file_server.requests_for("/missing.bin")) == 1
    assert _cache_files(cache) == []


def test_mirrors_are_tried_in_order(file_server, fetcher):
    missing = file_server.url("/primary/blob.bin")
    mirror = file_server.add("/mirror/blob.bin", BODY)
    assert fetcher.fetch(_pin("blob", missing, mirror)).read_bytes() == BODY


def test_connection_refused_is_one_clear_error(fetcher):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/blob.bin"
    with pytest.raises(PinError, match=rf"connection refused by 127\.0\.0\.1:{port}"):
        fetcher.fetch(_pin("blob", url))


def test_offline_with_empty_cache_says_so(file_server, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    with pytest.raises(OfflineMiss, match=r"not in cache .* --offline"):
        Fetcher(cache, offline=True).fetch(pin)
    assert file_server.log == [], "offline never touches the network"


def test_offline_uses_the_cache(file_server, fetcher, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    fetcher.fetch(pin)
    assert Fetcher(cache, offline=True).fetch(pin).read_bytes() == BODY


def test_several_pins_fetch_in_parallel(file_server, fetcher):
    bodies = {f"p{i}": os.urandom(50_000 + i) for i in range(6)}
    pins = [
        _pin(name, file_server.add(f"/{name}", body), body=body) for name, body in bodies.items()
    ]
    paths = fetcher.fetch_many(pins, jobs=4)
    assert {name: paths[name].read_bytes() for name in bodies} == bodies


def test_fetch_many_reports_every_failure(file_server, fetcher):
    good = _pin("good", file_server.add("/good", BODY))
    # Other digests: a pin with good's digest is served by good's cached file.
    bad1 = _pin("bad1", file_server.url("/nope1"), body=b"one")
    bad2 = _pin("bad2", file_server.url("/nope2"), body=b"two")
    with pytest.raises(PinError) as info:
        fetcher.fetch_many([good, bad1, bad2])
    assert "bad1" in str(info.value) and "bad2" in str(info.value)
    assert fetcher.cache.has(good)


def test_http_proxy_from_environment_is_used(file_server, fetcher, proxy, monkeypatch):
    seen, proxy_url = proxy
    url = file_server.add("/blob.bin", BODY)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    assert fetcher.fetch(_pin("blob", url)).read_bytes() == BODY
    assert seen == [url], "the download went through the proxy"


def test_the_lower_case_proxy_variable_wins_everywhere_as_requests_reads_it(
    file_server, fetcher, proxy, monkeypatch
):
    # requests reads http_proxy before HTTP_PROXY: the error, doctor and the containers'
    # settings follow the same spelling (they took the upper-case one, and disagreed).
    seen, proxy_url = proxy
    url = file_server.add("/blob.bin", BODY)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    monkeypatch.setenv("http_proxy", "http://[::1")
    spelled = FetchSettings(proxy_spellings=proxy_spellings(os.environ))
    with pytest.raises(PinError, match=r"proxy http_proxy=http://\[::1 is unusable") as info:
        Fetcher(fetcher.cache, settings=spelled).fetch(_pin("blob", url))
    assert "fix http_proxy" in info.value.hint
    environ = {"HTTP_PROXY": proxy_url, "http_proxy": "http://[::1"}
    assert proxy_environment(environ)["HTTP_PROXY"] == "http://[::1"
    check = proxies_check(proxy_environment(environ), proxy_conflicts(environ))
    assert not check.ok and "http_proxy and HTTP_PROXY differ (http_proxy is the one used)" in (
        check.detail
    )
    monkeypatch.setenv("http_proxy", proxy_url)
    monkeypatch.setenv("HTTP_PROXY", "http://[::1")
    assert fetcher.fetch(_pin("blob", url)).read_bytes() == BODY
    assert seen == [url]
    # An empty spelling is no setting (a devcontainer passes both, one empty): no conflict.
    environ = {"HTTP_PROXY": proxy_url, "http_proxy": ""}
    assert proxy_environment(environ)["http_proxy"] == proxy_url
    assert proxy_conflicts(environ) == ()


def test_a_ca_bundle_with_no_certificate_is_named_before_connecting(file_server, cache, tmp_path):
    # TLS then failed with "set REQUESTS_CA_BUNDLE to your CA bundle": the variable was set,
    # and doctor said ok.
    bundle = tmp_path / "bundle.pem"
    bundle.write_text("not a certificate\n")
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    for path, problem in (
        (str(bundle), "holds no PEM certificate"),
        ("/dev/null", "is neither a file nor a folder"),
        (str(tmp_path / "none.pem"), "does not exist"),
    ):
        fetcher = Fetcher(cache, settings=FetchSettings(ca_bundle=path))
        with pytest.raises(PinError, match=rf"cannot download .*: CA bundle {path} .*{problem}"):
            fetcher.fetch(_pin("blob", file_server.add("/blob.bin", BODY)))
        assert not _ca_bundle(path).ok and problem in _ca_bundle(path).detail
    assert file_server.log == []
    bundle.write_text("# corporate\n" + "x" * 200_000 + "\n" + pem)
    assert ca_bundle_problem(str(bundle)) is None
    assert ca_bundle_problem(str(tmp_path)) is None, "a folder of certificates"


def test_no_proxy_bypasses_the_proxy(file_server, fetcher, proxy, monkeypatch):
    seen, proxy_url = proxy
    url = file_server.add("/blob.bin", BODY)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert fetcher.fetch(_pin("blob", url)).read_bytes() == BODY
    assert seen == []
    assert len(file_server.requests_for("/blob.bin")) == 1


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unreachable_proxy_is_named(file_server, fetcher, monkeypatch):
    port = _free_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    with pytest.raises(
        PinError, match=rf"cannot reach the proxy HTTP_PROXY=http://127\.0\.0\.1:{port} "
    ):
        fetcher.fetch(_pin("blob", file_server.add("/blob.bin", BODY)))


def test_unreachable_proxy_is_named_in_its_spelling_its_password_masked(file_server, tmp_path):
    port = _free_port()
    url = file_server.add("/blob.bin", BODY)
    pins = write_pins(
        tmp_path / "p.yaml", f"pins:\n  blob:\n    url: {url}\n    sha256: {sha256(BODY)}\n"
    )
    env = {"http_proxy": f"http://me:s3cret@127.0.0.1:{port}", "HTTP_PROXY": "", "NO_PROXY": ""}
    result = run_opforge(
        "pins",
        "fetch",
        "--pins",
        str(pins),
        "--cache",
        str(tmp_path / "c"),
        "--retries",
        "0",
        env=env,
    )
    assert result.returncode == 1 and "s3cret" not in result.stderr
    assert f"cannot reach the proxy http_proxy=http://me:***@127.0.0.1:{port} " in result.stderr


def test_stale_partials_of_killed_downloads_are_cleared(file_server, fetcher, cache):
    cache.ensure()
    stale = cache.tmp / "blob.killed.part"
    fresh = cache.tmp / "blob.running.part"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(stale, (day_ago, day_ago))
    fetcher.fetch(_pin("blob", file_server.add("/blob.bin", BODY)))
    assert not stale.exists()
    assert fresh.exists(), "a partial that may belong to a running download is kept"


def test_concurrent_fetches_of_one_pin_download_it_once(file_server, cache):
    body = os.urandom(2_000)
    pin = _pin("blob", file_server.add("/blob.bin", body, trickle_s=0.0005), body=body)
    fetchers = [Fetcher(cache) for _ in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        paths = list(pool.map(lambda f: f.fetch(pin), fetchers))
    assert {p.read_bytes() for p in paths} == {body}
    assert len(file_server.requests_for("/blob.bin")) == 1, "the others waited, then used it"
    assert _cache_files(cache) == [f"sha256/{pin.sha256[:2]}/{pin.sha256}"]


@pytest.mark.parametrize("kind", ["link", "folder", "pipe"])
def test_a_partial_name_taken_by_something_else_is_named(
    file_server, fetcher, cache, tmp_path, kind
):
    # The error blamed the cache folder ("cannot write to cache directory"), or, for a pipe,
    # the download went into it and hung.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    cache.ensure()
    part = cache.tmp / f"{pin.sha256}.part"
    {
        "link": lambda: part.symlink_to(victim),
        "folder": part.mkdir,
        "pipe": lambda: os.mkfifo(part),
    }[kind]()
    with pytest.raises(ConfigError, match=rf"cache entry {part} is not a regular file") as info:
        fetcher.fetch(pin)
    assert info.value.hint.startswith(f"remove it (rm -r {part})")
    assert victim.read_text() == "keep"
    assert file_server.log == []


def test_a_resumed_partial_that_does_not_match_is_downloaded_again(file_server, fetcher, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    cache.ensure()
    (cache.tmp / f"{pin.sha256}.part").write_bytes(os.urandom(1000))  # not BODY's first bytes
    assert fetcher.fetch(pin).read_bytes() == BODY
    assert [r[2] for r in file_server.requests_for("/blob.bin")] == ["bytes=1000-", None]
    assert _cache_files(cache) == [f"sha256/{pin.sha256[:2]}/{pin.sha256}"]


def test_the_time_budget_covers_retries_and_their_backoff(file_server, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, fail_first=100))
    patient = Fetcher(cache, settings=FetchSettings(retries=5, backoff=2.0, deadline=0.5))
    started = time.monotonic()
    with pytest.raises(PinError, match=r"pin blob: .* ran out of its time budget: [\d.]+ s"):
        patient.fetch(pin)
    assert time.monotonic() - started < 2, "no backoff sleep outlasts the budget"


def test_the_time_budget_ends_a_server_that_trickles_its_headers(file_server, cache):
    # Every byte resets the per-read timeout, so only the budget can end this: it was checked
    # only between body chunks, and the fetch hung.
    pin = _pin("blob", file_server.add("/blob.bin", BODY, trickle_headers_s=0.1))
    patient = Fetcher(cache, settings=FetchSettings(retries=3, backoff=0.01, deadline=1.0))
    started = time.monotonic()
    with pytest.raises(PinError, match=r"pin blob: .* ran out of its time budget"):
        patient.fetch(pin)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("file:///etc/passwd", "redirected to a URL that is not http:// or https://"),
        ("/loop", r"redirect loop \(more than 30 redirects\)"),
    ],
)
def test_a_redirect_nothing_can_follow_fails_at_once(file_server, cache, location, reason):
    # Retried as "transfer interrupted (InvalidSchema)" / "(TooManyRedirects)", five times.
    said: list[str] = []
    fetcher = Fetcher(cache, settings=FetchSettings(retries=4, backoff=0.01), log=said.append)
    file_server.add("/loop", b"", redirect_to="/loop")
    url = file_server.add("/blob.bin", BODY, redirect_to=location)
    with pytest.raises(PinError, match=rf"pin blob: download failed \(.*/blob\.bin: {reason}\)"):
        fetcher.fetch(_pin("blob", url))
    assert said == [], "not retried"
    assert len(file_server.requests_for("/blob.bin")) == 1


def test_a_host_name_no_resolver_takes_is_refused_with_the_pins_file():
    from opforge.pins.model import url_problem

    for url in (f"http://{'x' * 70}.example/f", "http://a..b/f"):
        assert "has an empty part or one over 63 characters" in url_problem(url)
    assert url_problem("http://bücher.example/f") is None
    assert url_problem("http://[::1]:8080/f") is None


def test_a_mirror_serving_other_bytes_is_passed_over_for_the_next(file_server, cache):
    said: list[str] = []
    fetcher = Fetcher(cache, settings=FetchSettings(retries=0), log=said.append)
    bad = file_server.add("/bad/blob.bin", BODY[:1000])
    good = file_server.add("/good/blob.bin", BODY)
    assert fetcher.fetch(_pin("blob", bad, good)).read_bytes() == BODY
    assert any("sha256 mismatch" in line and "trying the next URL" in line for line in said)
    assert _cache_files(cache) == [f"sha256/{sha256(BODY)[:2]}/{sha256(BODY)}"]


def test_when_every_mirror_serves_other_bytes_the_first_mismatch_is_raised(file_server, fetcher):
    first = file_server.add("/a/blob.bin", b"one")
    second = file_server.add("/b/blob.bin", b"two")
    with pytest.raises(
        DigestMismatch, match=r"sha256 mismatch for .*/a/blob\.bin.*\(and the other 1"
    ):
        fetcher.fetch(_pin("blob", first, second))
    assert _cache_files(fetcher.cache) == []


def test_a_body_of_exactly_the_pinned_size_is_accepted_without_a_length(file_server, fetcher):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, announce_length=False), size=len(BODY))
    assert fetcher.fetch(pin).read_bytes() == BODY


def test_settings_refuse_negative_retries_and_empty_budgets():
    with pytest.raises(ConfigError, match="retries must be 0 or more"):
        FetchSettings(retries=-1)
    with pytest.raises(ConfigError, match="time budget must be positive"):
        FetchSettings(deadline=0)
    with pytest.raises(ConfigError, match="size cap must be positive"):
        FetchSettings(max_bytes=0)


def test_a_read_only_cache_still_serves_verified_files_offline(file_server, tmp_path):
    from tests.hostile.conftest import mount_tmpfs, remount_read_only

    point = tmp_path / "mnt"
    point.mkdir()
    mount_tmpfs(point, "4m")
    try:
        cache = ContentCache(point / "cache")
        pin = _pin("blob", file_server.add("/blob.bin", BODY))
        Fetcher(cache).fetch(pin)
        remount_read_only(point)
        assert Fetcher(cache, offline=True).fetch(pin).read_bytes() == BODY
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_ctrl_c_stops_the_downloads_in_flight(tmp_path, file_server):
    # Interrupted, `pins fetch` stops within a chunk: it does not wait for the whole file, and
    # commits nothing to the cache (the partial stays for a resume).
    body = os.urandom(100_000)
    url = file_server.add("/slow.bin", body, trickle_s=0.002)  # minutes for the whole file
    pins = write_pins(
        tmp_path / "pins.yaml", f"pins:\n  slow:\n    url: {url}\n    sha256: {sha256(body)}\n"
    )
    cache = tmp_path / "cache"
    # The CLI as `python -m opforge` runs it, with Ctrl-C's default handler: a child inherits an
    # ignored SIGINT, and an earlier test in the same session may have left it ignored.
    cli = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from opforge.cli import main; sys.exit(main())"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", cli, "pins", "fetch", "--pins", str(pins), "--cache", str(cache)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            not any(p.stat().st_size for p in cache.rglob("*.part")) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert time.monotonic() < deadline, "the download never started"
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        _, errors = process.communicate(timeout=60)
    finally:
        process.kill()  # a failed check must not leave the download running
        process.wait()
    assert time.monotonic() - interrupted < 5, "Ctrl-C waited for the download to finish"
    assert process.returncode == 130 and "opforge: interrupted" in errors, errors
    assert "Traceback" not in errors
    assert not [p for p in cache.glob("sha256/**/*") if p.is_file()], "nothing was committed"


@pytest.mark.parametrize("length", ["\u00b2", "12abc", "-5", ""])
def test_a_content_length_that_is_no_number_counts_as_none(file_server, fetcher, length):
    # '²'.isdigit() is true, yet int('²') fails: only ASCII digits make a length.
    pin = _pin("blob", file_server.add("/blob.bin", BODY, length_header=length), size=len(BODY))
    assert fetcher.fetch(pin).read_bytes() == BODY


def test_a_truncated_body_says_how_much_arrived_of_what(file_server, cache):
    pin = _pin("blob", file_server.add("/blob.bin", BODY, cut_first=100))
    once = Fetcher(cache, settings=FetchSettings(retries=0, timeout=5))
    with pytest.raises(PinError) as info:
        once.fetch(pin)
    half = len(BODY) // 2
    assert (
        f"127.0.0.1:{file_server.port} closed the connection after {half} of {len(BODY)} bytes"
        in str(info.value)
    )


@pytest.mark.parametrize(
    "value",
    [
        "::::",
        "http://[::1",
        "http://127.0.0.1:99999",
        "ftp://x",
        " ",
        "alice:pw@h:3128",
        f"http://{'a' * 64}.example:1",  # blamed the pin's URL: "not a valid URL"
    ],
)
def test_a_malformed_proxy_is_named_at_once_and_not_retried(file_server, cache, monkeypatch, value):
    said: list[str] = []
    fetcher = Fetcher(cache, settings=FetchSettings(retries=3, backoff=0.01), log=said.append)
    monkeypatch.setenv("HTTP_PROXY", value)
    with pytest.raises(PinError, match=r"pin blob: cannot download .*: proxy HTTP_PROXY=") as info:
        fetcher.fetch(_pin("blob", file_server.add("/blob.bin", BODY)))
    assert "unusable" in str(info.value) and "\n" not in str(info.value)
    assert "HTTP_PROXY" in info.value.hint
    assert said == [], "no retries"
    assert file_server.log == []
    check = proxies_check({"HTTP_PROXY": value})
    assert not check.ok and "HTTP_PROXY=" in check.detail and "unusable" in check.detail


def test_a_malformed_proxy_password_stays_masked_in_the_error(file_server, fetcher, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://user:pa/ss@127.0.0.1:1")
    with pytest.raises(PinError) as info:
        fetcher.fetch(_pin("blob", file_server.add("/blob.bin", BODY)))
    assert "proxy HTTP_PROXY=http://user:***@127.0.0.1:1 is unusable" in str(info.value)
    assert "pa/ss" not in str(info.value)


def test_only_the_proxy_a_download_uses_is_checked(file_server, fetcher, proxy, monkeypatch):
    seen, proxy_url = proxy
    url = file_server.add("/blob.bin", BODY)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    monkeypatch.setenv("HTTPS_PROXY", "::::")  # not used for an http:// URL
    assert fetcher.fetch(_pin("blob", url)).read_bytes() == BODY
    assert seen == [url]


def _interruptible_cli(*args: str) -> subprocess.Popen:
    # The CLI as `python -m opforge` runs it, with Ctrl-C's default handler (see above).
    cli = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from opforge.cli import main; sys.exit(main())"
    )
    return subprocess.Popen(
        [sys.executable, "-c", cli, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_stops_a_download_from_a_server_that_never_answers(tmp_path):
    digest = sha256(b"never sent")
    cache = tmp_path / "cache"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(30)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/x"
        pins = write_pins(
            tmp_path / "p.yaml", f"pins:\n  hang:\n    url: {url}\n    sha256: {digest}\n"
        )
        process = _interruptible_cli("pins", "fetch", "--pins", str(pins), "--cache", str(cache))
        try:
            connection, _ = silent.accept()  # and never answer: the read timeout is 30 s
            with connection:
                time.sleep(0.5)  # the request is sent, the reader blocked on the answer
                process.send_signal(signal.SIGINT)
                _, errors = process.communicate(timeout=5)
        finally:
            process.kill()
            process.wait()
    assert process.returncode == 130 and "opforge: interrupted" in errors, errors
    assert "retrying" not in errors and "Traceback" not in errors
    assert [p for p in cache.rglob("*") if p.is_file()] == [], "no partial file, nothing committed"


def test_ctrl_c_stops_a_wait_for_another_process_download(tmp_path, file_server):
    pin = _pin("blob", file_server.add("/blob.bin", BODY))
    pins = write_pins(
        tmp_path / "p.yaml", f"pins:\n  blob:\n    url: {pin.urls[0]}\n    sha256: {pin.sha256}\n"
    )
    cache = ContentCache(tmp_path / "cache")
    with cache.partial(pin, 1):  # another download holds the partial, locked
        process = _interruptible_cli(
            "pins", "fetch", "--pins", str(pins), "--cache", str(cache.root)
        )
        try:
            assert "another opforge process is downloading it" in process.stderr.readline()
            process.send_signal(signal.SIGINT)
            _, errors = process.communicate(timeout=5)
        finally:
            process.kill()
            process.wait()
    assert process.returncode == 130 and "opforge: interrupted" in errors, errors
    assert file_server.log == []


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://a/\u202e/gpj.exe", "202E"),
        ("http://a/b\u200b.whl", "200B"),
        ("http://a/\ufeff", "FEFF"),
    ],
)
def test_a_url_with_an_unprinted_character_is_refused(tmp_path, url, code):
    # A right-to-left override makes the URL read otherwise in a review than it fetches.
    digest = sha256(b"x")
    path = write_pins(tmp_path / "p.yaml", f'pins:\n  x:\n    url: "{url}"\n    sha256: {digest}\n')
    with pytest.raises(ConfigError, match=rf"invisible or formatting character \(U\+{code}\)"):
        load_pins(path)


def _certificate(folder, name: str, address: str) -> tuple:
    """(key, certificate) of a self-signed certificate for ``address``, made by openssl."""
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={name}", "-addext", f"subjectAltName=IP:{address}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


@contextlib.contextmanager
def _https_server(key, cert):
    """A loopback HTTPS server of BODY at /blob.bin: (its URL, the connections it took)."""
    import http.server
    import ssl
    import threading

    connections = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def get_request(self):
            connections.append(1)
            return super().get_request()

    server = Server(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/blob.bin", connections
    finally:
        server.shutdown()


def test_an_untrusted_certificate_names_the_bundle_and_is_not_retried(tmp_path):
    key, cert = _certificate(tmp_path, "served", "127.0.0.1")
    _, other = _certificate(tmp_path, "other", "127.0.0.1")
    with _https_server(key, cert) as (url, connections):
        pins = write_pins(
            tmp_path / "pins.yaml", f"pins:\n  blob:\n    url: {url}\n    sha256: {sha256(BODY)}\n"
        )
        fetch = ("pins", "fetch", "--pins", str(pins), "--cache", str(tmp_path / "c"))

        wrong = run_opforge(*fetch, env={"REQUESTS_CA_BUNDLE": str(other)})
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
        said = f"the CA bundle {other} (REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE) holds no CA"
        assert said in wrong.stderr
        assert "retrying" not in wrong.stderr and len(connections) == 1

        trusted = run_opforge(*fetch, env={"REQUESTS_CA_BUNDLE": str(cert)})
        assert trusted.returncode == 0, trusted.stderr
        cached = tmp_path / "c" / "sha256" / sha256(BODY)[:2] / sha256(BODY)
        assert cached.read_bytes() == BODY


def test_a_certificate_for_another_host_is_said_in_openssl_s_words(tmp_path):
    # Trusted but made for 127.0.0.2: the CA bundle is not what is wrong.
    key, cert = _certificate(tmp_path, "elsewhere", "127.0.0.2")
    with _https_server(key, cert) as (url, _):
        pins = write_pins(
            tmp_path / "pins.yaml", f"pins:\n  blob:\n    url: {url}\n    sha256: {sha256(BODY)}\n"
        )
        result = run_opforge(
            "pins", "fetch", "--pins", str(pins), "--cache", str(tmp_path / "c"),
            env={"REQUESTS_CA_BUNDLE": str(cert)},
        )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "TLS verification failed for 127.0.0.1" in result.stderr
    assert "address mismatch, certificate is not valid for" in result.stderr
    assert "holds no CA" not in result.stderr
