"""Masking credentials: every shape a URL or proxy setting can carry them in."""

from __future__ import annotations

import pytest

from opforge.doctor import proxies_check
from opforge.redact import mask_credentials, mask_url
from tests.conftest import run_opforge


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("http://alice:s3cret@proxy:3128", "http://alice:***@proxy:3128"),
        ("https://ghp_T0KEN@files.corp/x.whl", "https://***@files.corp/x.whl"),
        ("http://bob:p@ss@proxy:8080/", "http://bob:***@proxy:8080/"),
        (
            "fetch (http://u:pw@h/a: HTTP 404); http://t@h/b",
            "fetch (http://u:***@h/a: HTTP 404); http://***@h/b",
        ),
        ("proxy alice:s3cret@proxy:3128 refused", "proxy alice:***@proxy:3128 refused"),
        ("http://h:80/path/with@sign", "http://h:80/path/with@sign"),
        (
            "connection refused by 127.0.0.1:8080 at 10:30",
            "connection refused by 127.0.0.1:8080 at 10:30",
        ),
        # A raw '/', '?', '#' or space in a password: urllib3 cannot split such an authority,
        # but the secret is one all the same, and is masked up to the last '@'.
        ("http://user:pa/ss@127.0.0.1:1/x", "http://user:***@127.0.0.1:1/x"),
        ("http://u:p?w@h/y and http://u:p#w@h z", "http://u:***@h/y and http://u:***@h z"),
        (
            "HTTPS_PROXY=http://user:pa ss@127.0.0.1:1 refused",
            "HTTPS_PROXY=http://user:***@127.0.0.1:1 refused",
        ),
        ("proxy user:pa/ss@127.0.0.1:1 refused", "proxy user:***@127.0.0.1:1 refused"),
        # An '@' in the path after credentials stays: the userinfo ends where urllib3 ends it.
        (
            "https://T0KEN@registry.example/@scope/pkg",
            "https://***@registry.example/@scope/pkg",
        ),
        # Secrets in a query: signed mirror URLs, S3 presigned ones, API keys.
        (
            "sha256 mismatch for https://m.example/f.whl?token=abc123&v=2: expected",
            "sha256 mismatch for https://m.example/f.whl?token=***&v=2: expected",
        ),
        (
            "https://b.s3.example/f?X-Amz-Credential=AK%2F1&X-Amz-Signature=ff00#frag",
            "https://b.s3.example/f?X-Amz-Credential=***&X-Amz-Signature=***#frag",
        ),
        (
            "http://h/f?api_key=k1 and http://h/g?page=2",
            "http://h/f?api_key=*** and http://h/g?page=2",
        ),
    ],
)
def test_mask_credentials_in_text(text, masked):
    assert mask_credentials(text) == masked


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("alice:s3cret@proxy:3128", "alice:***@proxy:3128"),
        ("ghp_T0KEN@proxy:3128", "***@proxy:3128"),
        ("http://ghp_T0KEN@proxy:3128", "http://***@proxy:3128"),
        ("proxy:3128", "proxy:3128"),
        ("localhost,127.0.0.1,.corp", "localhost,127.0.0.1,.corp"),
        # One value is one URL: a space belongs to the password, as urllib3 reads it.
        ("http://user:pa ss@127.0.0.1:1", "http://user:***@127.0.0.1:1"),
        ("http://user:pa/ss@127.0.0.1:1", "http://user:***@127.0.0.1:1"),
        ("user:pa/ss@127.0.0.1:1", "user:***@127.0.0.1:1"),
        ("user:pa ss@127.0.0.1:1", "user:***@127.0.0.1:1"),
        ("http://h:80/path/with@sign", "http://h:80/path/with@sign"),
    ],
)
def test_mask_url_takes_a_scheme_or_none(value, masked):
    assert mask_url(value) == masked


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("http://user:pa ss@127.0.0.1:1", "http://user:***@127.0.0.1:1"),
        ("http://user:pa/ss@127.0.0.1:1", "http://user:***@127.0.0.1:1"),
        ("user:pa/ss@127.0.0.1:1", "user:***@127.0.0.1:1"),
        ("http://user:pa?ss@127.0.0.1:1", "http://user:***@127.0.0.1:1"),
    ],
)
def test_doctor_masks_a_proxy_password_holding_a_space_or_slash(value, shown):
    result = run_opforge("doctor", env={"HTTPS_PROXY": value}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"HTTPS_PROXY={shown}" in result.stdout
    assert "ss@" not in result.stdout + result.stderr, "no part of the password is shown"


def test_doctor_row_keeps_the_user_and_masks_the_password():
    check = proxies_check({"HTTPS_PROXY": "http://user:pa ss@127.0.0.1:1"})
    assert check.detail == "HTTPS_PROXY=http://user:***@127.0.0.1:1"
