"""Masking credentials: every shape a URL or proxy setting can carry them in."""

from __future__ import annotations

import pytest

from opforge.redact import mask_credentials, mask_url


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
    ],
)
def test_mask_url_takes_a_scheme_or_none(value, masked):
    assert mask_url(value) == masked
