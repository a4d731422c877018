"""``pins fetch --jobs``: bounded like ``build --jobs``, refused by the parser in one line."""

from __future__ import annotations

import pytest

from opforge.cli.pins import MAX_DOWNLOADS
from tests.conftest import run_opforge, sha256, write_pins


@pytest.mark.parametrize(
    ("jobs", "text"),
    [
        (str(MAX_DOWNLOADS + 1), f"must be at most {MAX_DOWNLOADS}, got {MAX_DOWNLOADS + 1}"),
        (str(10**9), f"must be at most {MAX_DOWNLOADS}, got {10**9}"),
        ("9" * 30, f"must be at most {MAX_DOWNLOADS}, got {'9' * 30}"),
    ],
)
def test_too_many_parallel_downloads_is_a_one_line_usage_error(tmp_path, jobs, text):
    """Refused before the pins file is read or a thread starts: no cache is created."""
    pins = write_pins(tmp_path / "pins.yaml", "pins: {}\n")
    cache = tmp_path / "cache"
    result = run_opforge(
        "pins", "fetch", "--pins", str(pins), "--cache", str(cache), "--jobs", jobs, cwd=tmp_path
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"opforge: error: argument --jobs: {text}",
        "  hint: see `opforge pins fetch --help`",
    ]
    assert not cache.exists()


def test_the_bound_is_in_the_help():
    result = run_opforge("pins", "fetch", "--help")
    assert result.returncode == 0
    assert f"parallel downloads, 1 to {MAX_DOWNLOADS}" in " ".join(result.stdout.split())


def test_the_most_parallel_downloads_are_accepted(tmp_path, file_server):
    body = b"x" * 1000
    url = file_server.add("/one.bin", body)
    pins = write_pins(
        tmp_path / "pins.yaml", f"pins:\n  one:\n    url: {url}\n    sha256: {sha256(body)}\n"
    )
    result = run_opforge(
        "pins",
        "fetch",
        "--pins",
        str(pins),
        "--cache",
        str(tmp_path / "cache"),
        "--jobs",
        str(MAX_DOWNLOADS),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["one", "fetched"]
