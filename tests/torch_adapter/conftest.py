"""The PyTorch adapter is tested as installed (the wheel), never from the source tree."""

from __future__ import annotations

import importlib.util

import pytest


def _adapter_missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    try:
        import opforge.torch  # noqa: F401
    except ImportError as exc:
        return f"the opforge.torch wheel is not installed ({exc}); `nox -s tests` builds and installs it"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip this directory's tests, with the reason, when the adapter is not installed."""
    reason = None
    for item in items:
        if "torch_adapter" in str(item.fspath):
            reason = reason or _adapter_missing() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
