"""Hostile servers and interrupted downloads: trickling, over-sending, flaky, killed midway."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opforge.pins.cache import ContentCache
from opforge.pins.model import load_pins
from tests.hostile.conftest import assert_one_line_error, opforge, pin_fields, pins_yaml, tree

BODY = os.urandom(1 << 20)


def _fetch(pins: Path, cache: Path, *extra: str, name: str = "blob"):
    return opforge("pins", "fetch", name, "--pins", str(pins), "--cache", str(cache), *extra)


def test_a_trickling_server_runs_out_of_the_time_budget(file_server, tmp_path):
    body = os.urandom(400)
    url = file_server.add("/slow.tar.gz", body, trickle_s=0.05)  # 20 s for the whole file
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, body))
    started = time.monotonic()

    error = assert_one_line_error(
        _fetch(pins, tmp_path / "cache", "--deadline", "1.5"), "pin blob", "time budget"
    )

    assert time.monotonic() - started < 12
    assert " s elapsed of 1.5 s" in error and "bytes received" in error
    assert not (tmp_path / "cache" / "sha256").exists() or not any(
        (tmp_path / "cache" / "sha256").iterdir()
    )


def test_an_announced_body_over_the_pinned_size_is_not_downloaded(file_server, tmp_path):
    url = file_server.add("/blob.tar.gz", os.urandom(8 << 20))
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    assert_one_line_error(
        _fetch(pins, tmp_path / "cache"),
        "pin blob",
        f"announced {8 << 20} bytes, more than the pinned size of {len(BODY)} bytes",
    )

    assert tree(tmp_path / "cache") == {"sha256": "dir", "tmp": "dir"}


def test_an_unannounced_body_is_cut_at_the_pinned_size(file_server, tmp_path):
    url = file_server.add("/blob.tar.gz", BODY + os.urandom(32 << 20), announce_length=False)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    assert_one_line_error(
        _fetch(pins, tmp_path / "cache"),
        "pin blob",
        f"sent more than the pinned size of {len(BODY)} bytes; stopped there",
    )

    assert tree(tmp_path / "cache") == {"sha256": "dir", "tmp": "dir"}


def test_a_pin_without_size_is_cut_at_the_cap(file_server, tmp_path):
    url = file_server.add("/blob.tar.gz", os.urandom(32 << 20), announce_length=False)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY, size=False))

    assert_one_line_error(
        _fetch(pins, tmp_path / "cache", "--max-bytes", str(2 << 20)),
        "pin blob",
        f"sent more than the {2 << 20} byte cap for a pin with no size",
    )

    assert tree(tmp_path / "cache") == {"sha256": "dir", "tmp": "dir"}


def test_negative_retries_are_refused_before_anything_runs(tmp_path):
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields("http://127.0.0.1:9/x", BODY))

    result = _fetch(pins, tmp_path / "cache", "--retries", "-1")

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "argument --retries: must be 0 or more, got -1" in result.stderr
    assert not (tmp_path / "cache").exists()


def test_no_retries_means_one_attempt_and_no_retry_message(file_server, tmp_path):
    url = file_server.add("/blob.tar.gz", BODY, fail_first=100)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    result = _fetch(pins, tmp_path / "cache", "--retries", "0")

    assert_one_line_error(result, "HTTP 503", "(gave up after 1 attempt)")
    assert "retrying" not in result.stderr
    assert len(file_server.requests_for("/blob.tar.gz")) == 1


def test_retry_messages_count_up_to_the_retries_asked_for(file_server, tmp_path):
    url = file_server.add("/blob.tar.gz", BODY, fail_first=100)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    result = _fetch(pins, tmp_path / "cache", "--retries", "2")

    assert_one_line_error(result, "(gave up after 3 attempts)")
    counters = [line.rsplit("(", 1)[1] for line in result.stderr.splitlines() if "retrying" in line]
    assert counters == ["1/2)", "2/2)"]


def test_a_download_killed_midway_is_resumed_by_the_next_run(file_server, tmp_path):
    half = len(BODY) // 2
    url = file_server.add("/blob.tar.gz", BODY, stall_after=half)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "opforge", "pins", "fetch", "--pins", str(pins)]
    killed = subprocess.Popen(
        [*command, "--cache", str(cache)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    partial = cache / "tmp" / f"{load_pins(pins).pins['blob'].sha256}.part"
    give_up = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size == half):
        assert time.monotonic() < give_up and killed.poll() is None, "the first half never landed"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    file_server.files["/blob.tar.gz"].stall_after = None

    result = _fetch(pins, cache)

    assert result.returncode == 0, result.stderr
    assert file_server.requests_for("/blob.tar.gz")[-1][2] == f"bytes={half}-"
    assert f"resuming an interrupted download at byte {half}" in result.stderr
    blob = ContentCache(cache).path_for(load_pins(pins).pins["blob"])
    assert blob.read_bytes() == BODY
    assert list((cache / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("userinfo", "secret"), [("alice:s3cret-pw", "s3cret-pw"), ("ghp_T0KEN", "ghp_T0KEN")]
)
def test_credentials_in_a_pin_url_stay_out_of_errors(file_server, tmp_path, userinfo, secret):
    url = file_server.url("/missing.tar.gz").replace("http://", f"http://{userinfo}@")
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    result = _fetch(pins, tmp_path / "cache")

    assert_one_line_error(result, "pin blob", "HTTP 404", "***@127.0.0.1")
    assert secret not in result.stderr + result.stdout


def test_a_token_in_an_unreachable_pin_url_stays_out_of_errors(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://ghp_T0KEN@127.0.0.1:{port}/x.tar.gz"
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))

    result = _fetch(pins, tmp_path / "cache", "--retries", "0")

    assert_one_line_error(result, f"connection refused by 127.0.0.1:{port}")
    assert "ghp_T0KEN" not in result.stderr
