"""What goes into a wheel's METADATA and archive, without building anything."""

from __future__ import annotations

import zipfile

import pytest

from opforge.build.wheel import build_wheel, wheel_files
from opforge.errors import BuildError
from opforge.requirements import requirement_problem


@pytest.mark.parametrize("text", ["torch", "torch==2.13.0", "numpy<2", 'x; python_version>"3"'])
def test_requirements_that_are_fine(text):
    assert requirement_problem(text) is None


@pytest.mark.parametrize(
    "text",
    [
        *("torch\nName: evil", "torch\r", "torch\x0bX: 1", "torch\x0c", "torch\x1c"),
        *("torch\x85", "torch\u2028X: 1", "torch\u2029", "torch\x00", "torch\x7f"),
    ],
)
def test_line_breaks_and_control_characters_are_refused(text):
    assert requirement_problem(text) == "contains a line break or control character"


@pytest.mark.parametrize("text", ["", "  "])
def test_an_empty_requirement_is_called_empty(text):
    assert requirement_problem(text) == "is empty"


def test_text_that_is_not_a_requirement_is_refused():
    problem = requirement_problem("torch >>> 2")
    assert problem is not None and problem.startswith("is not a PEP 508 requirement")


def test_build_wheel_refuses_an_injected_header_and_writes_nothing(tmp_path):
    root = tmp_path / "python"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    files = [root / "pkg" / "__init__.py"]
    with pytest.raises(BuildError, match="contains a line break"):
        build_wheel(root, files, "pkg", "1.0", ["torch\nName: evil"], tmp_path / "dist")
    assert not list(tmp_path.glob("dist/*"))
    with pytest.raises(BuildError, match=r"Version: '1.0\\nX: 1' contains a line break"):
        build_wheel(root, files, "pkg", "1.0\nX: 1", [], tmp_path / "dist")
    wheel = build_wheel(root, files, "pkg", "1.0", ["torch==2.13.0"], tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("pkg-1.0.dist-info/METADATA").decode()
    assert metadata.splitlines() == [
        "Metadata-Version: 2.1",
        "Name: pkg",
        "Version: 1.0",
        "Requires-Dist: torch==2.13.0",
    ]


def test_wheel_files_are_the_declared_outputs_under_the_root(tmp_path):
    prefix = tmp_path / "prefix"
    for rel in ("python/ns/mine/a.py", "python/ns/theirs/b.py", "lib/libx.so"):
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_text("")
    outputs = ["python/ns/mine/a.py", "lib/libx.so"]
    assert wheel_files(prefix, "python", outputs) == [prefix / "python/ns/mine/a.py"]
