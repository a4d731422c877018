"""Shared fixtures, and skipping of marked tests whose capability this machine lacks."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from opforge.dockerengine import engine_missing
from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher, FetchSettings
from opforge.proxies import PROXY_NAMES
from tests.servers import start_file_server, start_proxy

REPO = Path(__file__).resolve().parent.parent
# The local base image of the docker tests' pip images (.ci/docker-engine.sh makes it).
BASE = os.environ.get("OPFORGE_TEST_BASE_IMAGE", "opforge-base:bookworm")


def _cuda_device_missing() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no CUDA device: nvidia-smi not found"
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if out.returncode != 0 or "GPU" not in out.stdout:
        return "no CUDA device: nvidia-smi lists no GPU"
    return None


def _mindspore_missing() -> str | None:
    if importlib.util.find_spec("mindspore") is None:
        return "MindSpore is not installed"
    return None


_CAPABILITIES = {
    "gpu": _cuda_device_missing,
    "docker": engine_missing,
    "mindspore": _mindspore_missing,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip gpu/docker/mindspore tests with the reason the capability is missing."""
    reasons: dict[str, str | None] = {}
    for item in items:
        for marker, probe in _CAPABILITIES.items():
            if marker in item.keywords:
                if marker not in reasons:
                    reasons[marker] = probe()
                if reasons[marker]:
                    item.add_marker(pytest.mark.skip(reason=reasons[marker]))


@pytest.fixture(autouse=True)
def _no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set proxies themselves; the machine's own must not leak in."""
    for name in PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def file_server():
    """A real HTTP file server on 127.0.0.1."""
    state, running = start_file_server()
    yield state
    state.release.set()
    running.stop()


@pytest.fixture
def proxy():
    """A real recording forward proxy on 127.0.0.1: (forwarded URLs, proxy URL)."""
    seen, running = start_proxy()
    yield seen, f"http://127.0.0.1:{running.port}"
    running.stop()


@pytest.fixture
def cache(tmp_path: Path) -> ContentCache:
    """An empty content-addressed cache in a temporary directory."""
    return ContentCache(tmp_path / "cache")


@pytest.fixture
def fetcher(cache: ContentCache) -> Fetcher:
    """A fetcher with fast retries, so failure tests stay quick."""
    return Fetcher(cache, settings=FetchSettings(retries=2, backoff=0.01, timeout=5))


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def run_opforge(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    **popen: object,
) -> subprocess.CompletedProcess:
    """``python -m opforge ARGS`` as a user runs it: a subprocess of this interpreter, in this
    environment plus ``env``, output captured, exit status not checked."""
    return subprocess.run(
        [sys.executable, "-m", "opforge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
        **popen,
    )


def write_pins(path: Path, body: str) -> Path:
    """Write a pins file from an indented literal."""
    path.write_text(textwrap.dedent(body).lstrip())
    return path


@pytest.fixture(scope="session")
def client():
    """A Docker SDK client, once the base image of the docker tests exists."""
    import docker
    from docker.errors import ImageNotFound

    engine = docker.from_env(timeout=900)
    try:
        engine.images.get(BASE)
    except ImageNotFound:
        pytest.skip(f"base image {BASE} missing: .ci/run makes it with debootstrap | docker import")
    return engine
