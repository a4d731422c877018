"""Proxy credentials in every shape stay out of ``opforge doctor``."""

from __future__ import annotations

import pytest

from tests.hostile.conftest import opforge


@pytest.mark.parametrize(
    ("variable", "value", "shown", "secret"),
    [
        ("HTTPS_PROXY", "alice:s3cret-pw@proxy.corp:3128", "alice:***@proxy.corp:3128", "s3cret"),
        ("HTTP_PROXY", "http://ghp_T0KEN@proxy.corp:3128", "http://***@proxy.corp:3128", "T0KEN"),
        ("ALL_PROXY", "ghp_T0KEN@proxy.corp:1080", "***@proxy.corp:1080", "T0KEN"),
    ],
)
def test_doctor_masks_proxy_credentials(variable, value, shown, secret):
    result = opforge("doctor", env={variable: value})

    assert result.returncode == 0, result.stderr
    assert f"{variable.upper()}={shown}" in result.stdout
    assert secret not in result.stdout + result.stderr
