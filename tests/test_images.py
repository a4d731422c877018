"""Images without an engine: versions, build contexts (pins, hashes, CA), proxies, runner choice."""

from __future__ import annotations

from pathlib import Path

import pytest

from opforge.errors import ConfigError
from opforge.images.context import assemble, opforge_requirements
from opforge.images.service import ImageOptions, image_spec
from opforge.images.spec import load_combinations
from opforge.project import Project
from opforge.proxies import proxy_environment, uses_loopback
from opforge.runners import resolve_runner

REPO = Path(__file__).resolve().parent.parent


def project() -> Project:
    return Project(REPO, REPO / "checksums.yaml")


def test_versions_file_lists_cuda_13_pip_and_reasons_for_the_rest():
    combos = load_combinations(REPO / "images" / "versions.yaml")
    assert [c.cuda for c in combos] == ["13.0", "12.8", "12.4", "11.8"]
    assert combos[0].pip is not None and "nvidia-cudnn-cu13" in combos[0].pip["devel"]
    assert all(c.pip_reason for c in combos if c.pip is None)


def test_a_combination_without_pip_reason_is_refused(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text(
        "combinations:\n  - cuda: '12.4'\n    cudnn: '9.1'\n    pip: null\n"
        "    ngc: {devel: {image: a}, runtime: {image: b}}\n"
    )
    with pytest.raises(ConfigError, match=r"combinations\[0\]: `pip: null` needs a `pip_reason`"):
        load_combinations(path)


def test_unknown_cuda_names_the_known_ones():
    with pytest.raises(ConfigError) as raised:
        image_spec(project(), "devel", ImageOptions(cuda="10.2"))
    assert "no image combination for cuda 10.2" in raised.value.message
    assert "cuda 13.0 + cudnn 9.13" in raised.value.hint


def _context(tmp_path, fetcher, **options):
    spec = image_spec(project(), "devel", ImageOptions(find_links=(), **options))
    pins = project().load_pins()
    return assemble(spec, REPO / "images", tmp_path / "ctx", pins, fetcher, "sha256:base")


@pytest.fixture
def offline_pins_fetcher():
    """The real cache with the pinned CUDA wheels, as `opforge pins fetch` leaves it."""
    from opforge.paths import default_cache_dir
    from opforge.pins.cache import ContentCache
    from opforge.pins.fetch import Fetcher

    return Fetcher(ContentCache(default_cache_dir()))


@pytest.mark.slow
def test_context_pins_every_cuda_wheel_by_hash_and_validates_the_ca(tmp_path, offline_pins_fetcher):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    ctx = _context(tmp_path, offline_pins_fetcher, extra_ca=ca)
    pinned = (ctx.path / "context" / "pinned-devel.txt").read_text().splitlines()
    pins = project().load_pins().pins
    assert len(pinned) == 6
    for line in pinned:
        path, _, digest = line.partition(" --hash=sha256:")
        name = Path(path).name
        assert (ctx.path / "context" / "pinned" / name).is_file()
        assert any(p.filename == name and p.sha256 == digest for p in pins.values())
    packages = (ctx.path / "context" / "packages-devel.txt").read_text()
    assert "torch==2.13.0" in packages and "cmake" in packages
    assert (ctx.path / "context" / "extra-ca.pem").read_text() == ca.read_text()
    # Same inputs, same digest; another CA, another image.
    assert _context(tmp_path, offline_pins_fetcher, extra_ca=ca).digest == ctx.digest
    ca.write_text(ca.read_text() + ca.read_text())
    assert _context(tmp_path, offline_pins_fetcher, extra_ca=ca).digest != ctx.digest

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        _context(tmp_path, offline_pins_fetcher, extra_ca=bad)
    with pytest.raises(ConfigError, match=r"extra CA bundle .*missing\.pem"):
        _context(tmp_path, offline_pins_fetcher, extra_ca=tmp_path / "missing.pem")


def test_requirements_come_from_opforge_metadata():
    plain = opforge_requirements()
    with_build = opforge_requirements(("build",))
    assert any(r.startswith("pyyaml") for r in plain)
    assert not any(r.startswith("cmake") for r in plain)
    assert any(r.startswith("cmake") for r in with_build)


def test_proxies_both_spellings_and_loopback():
    env = {"https_proxy": "http://127.0.0.1:3128", "NO_PROXY": "localhost"}
    found = proxy_environment(env)
    assert found["HTTPS_PROXY"] == found["https_proxy"] == "http://127.0.0.1:3128"
    assert found["NO_PROXY"] == found["no_proxy"] == "localhost"
    assert uses_loopback(found)
    assert not uses_loopback(proxy_environment({"HTTP_PROXY": "http://proxy.corp:8080"}))
    assert uses_loopback({"HTTP_PROXY": "localhost:8888"})
    assert not uses_loopback({"NO_PROXY": "127.0.0.1"})


def test_auto_runner_says_why(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    runner, why = resolve_runner("auto")
    assert runner == "host" and why.startswith("auto: no Docker engine answers")
    assert resolve_runner("docker") == ("docker", "as asked")
