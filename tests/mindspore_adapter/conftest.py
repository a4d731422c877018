"""The MindSpore adapter is tested as installed (the wheel), never from the source tree."""

from __future__ import annotations

import importlib.util

import pytest


def _adapter_missing() -> str | None:
    if importlib.util.find_spec("mindspore") is None:
        return "MindSpore is not installed"
    try:
        import opforge.mindspore  # noqa: F401
    except ImportError as exc:
        return (
            f"the opforge.mindspore wheel is not installed ({exc}); "
            "`nox -s tests` builds and installs it"
        )
    return None


def pytest_collection_modifyitems(config, items):
    """Mark this directory's tests `mindspore`; skip them, with the reason, without the adapter."""
    reason = None
    for item in items:
        if "mindspore_adapter" in str(item.fspath):
            item.add_marker(pytest.mark.mindspore)
            reason = reason or _adapter_missing() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(params=["pynative", "graph"])
def mode(request, tmp_path, monkeypatch):
    """Each test runs in PYNATIVE and in GRAPH mode (ops called inside a compiled Cell)."""
    import mindspore as ms

    # A failed graph compile writes rank_0/om/analyze_fail.ir into the working directory.
    monkeypatch.chdir(tmp_path)
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)
