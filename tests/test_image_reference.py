"""Image references: a tag is cut from the last path component only, never at a registry's port,
and a recorded digest pins the repository the reference names."""

from __future__ import annotations

import pytest

from opforge.images.build import resolve_base
from opforge.images.reference import pinned, repository
from opforge.images.spec import Combination, ImageSpec, NgcImage

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("nvidia/cuda:12.4.1-devel-ubuntu22.04", "nvidia/cuda"),
        ("nvidia/cuda", "nvidia/cuda"),
        ("debian:bookworm-slim", "debian"),
        ("debian", "debian"),
        ("registry.example:5000/nvidia/cuda:12.4.1-devel", "registry.example:5000/nvidia/cuda"),
        ("registry.example:5000/nvidia/cuda", "registry.example:5000/nvidia/cuda"),
        ("localhost:5000/cuda", "localhost:5000/cuda"),
        (f"nvidia/cuda@{DIGEST}", "nvidia/cuda"),
        (f"nvidia/cuda:12.4.1-devel@{DIGEST}", "nvidia/cuda"),
        (f"registry.example:5000/nvidia/cuda:12.4.1@{DIGEST}", "registry.example:5000/nvidia/cuda"),
        (f"registry.example:5000/nvidia/cuda@{DIGEST}", "registry.example:5000/nvidia/cuda"),
    ],
)
def test_repository_drops_the_tag_and_digest_but_keeps_the_port(reference, name):
    assert repository(reference) == name
    assert pinned(reference, DIGEST) == f"{name}@{DIGEST}"


def _ngc_spec(image: str, digest: str | None) -> ImageSpec:
    ngc = {"devel": NgcImage(image, digest), "runtime": NgcImage(image, digest)}
    return ImageSpec("devel", "ngc", Combination("12.4", "9.1", ngc, None), "unused")


def test_an_ngc_base_on_a_registry_with_a_port_is_pinned_at_its_own_repository():
    """The client is not asked: an ngc base's identity is its reference."""
    image = "registry.example:5000/nvidia/cuda:12.4.1-devel"
    expected = f"registry.example:5000/nvidia/cuda@{DIGEST}"
    assert resolve_base(None, _ngc_spec(image, DIGEST)) == (expected, expected)
    assert resolve_base(None, _ngc_spec(image, None)) == (image, image)
    assert resolve_base(None, _ngc_spec("nvidia/cuda:12.4.1-devel", DIGEST))[0] == (
        f"nvidia/cuda@{DIGEST}"
    )
