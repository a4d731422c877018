"""Hostile project files: YAML alias bombs, deep nesting, oversized and non-UTF-8 files. Each is
refused in one line, fast, without a MemoryError, and nothing is written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.hostile.conftest import assert_one_line_error, dedent, opforge, tree


def _bomb(levels: int = 9) -> list[str]:
    """'Billion laughs' YAML values: ``levels`` anchored lists, each nine aliases of the one
    before (the last stands for 9**levels strings)."""
    values = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        values.append(f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return values


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with an empty pins file and one valid recipe."""
    (tmp_path / "checksums.yaml").write_text("pins: {}\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text("project(x NONE)\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "good.yaml").write_text(RECIPE.format(name="good", extra=""))
    return tmp_path


RECIPE = dedent(
    """
    name: {name}
    schema: 1
    sources: [src/CMakeLists.txt]
    cmake: {{source_dir: src}}
    profiles: {{cpu: {{}}}}
    outputs: [lib/x.so]
    {extra}
    """
)


def _validate(project: Path):
    return opforge("--project", str(project), "recipes", "validate", timeout=60)


def _assert_refused_fast(run, *fragments: str) -> None:
    started = time.monotonic()
    result = run()
    assert time.monotonic() - started < 30
    assert "MemoryError" not in result.stderr
    assert_one_line_error(result, *fragments)


def test_an_alias_bomb_in_the_pins_file(project):
    pins = project / "checksums.yaml"
    urls = ",\n      ".join(_bomb())
    pins.write_text(f"pins:\n  x:\n    urls: [\n      {urls}]\n    sha256: {'a' * 64}\n")
    before = tree(project)

    _assert_refused_fast(
        lambda: opforge("--project", str(project), "pins", "list", timeout=60),
        f"{pins}: YAML anchors and aliases are not allowed at line 4",
    )
    assert tree(project) == before


def test_an_alias_bomb_in_a_recipe(project):
    recipe = project / "recipes" / "bomb.yaml"
    laughs = "".join(f"l{i}: {value}\n" for i, value in enumerate(_bomb()))
    recipe.write_text(RECIPE.format(name="bomb", extra=laughs + "description: *l8"))

    _assert_refused_fast(lambda: _validate(project), str(recipe), "anchors and aliases")


def test_deeply_nested_yaml_in_a_recipe(project):
    recipe = project / "recipes" / "deep.yaml"
    recipe.write_text(
        RECIPE.format(name="deep", extra="python_packages: " + "[" * 100_000 + "]" * 100_000)
    )

    _assert_refused_fast(lambda: _validate(project), str(recipe), "nested deeper than 64 levels")


@pytest.mark.parametrize("number", ["9" * 4301, "0x" + "f" * 5000], ids=["decimal", "hex"])
def test_a_number_too_long_for_python_in_a_pins_file(project, number):
    # Python refuses to read an int of more than 4300 digits (inside the YAML loader), and to
    # print one that long (a hex one loaded, then failed in the pins model): both tracebacks.
    pins = project / "checksums.yaml"
    pins.write_text(f"pins:\n  x:\n    url: https://e.example/x\n    size: {number}\n")

    _assert_refused_fast(
        lambda: opforge("--project", str(project), "pins", "list"),
        f"{pins}: not valid YAML at line 4: a number of {len(number)} characters",
    )


def test_a_date_that_does_not_exist_in_a_pins_file(project):
    pins = project / "checksums.yaml"
    pins.write_text("pins: {}\nwhen: 2024-02-30\n")

    _assert_refused_fast(
        lambda: opforge("--project", str(project), "pins", "list"),
        f"{pins}: not valid YAML: day is out of range for month",
    )


def test_an_oversized_pins_file(project):
    pins = project / "checksums.yaml"
    pins.write_text("pins: {}\n" + "# padding\n" * 200_000)

    _assert_refused_fast(
        lambda: opforge("--project", str(project), "pins", "list"), str(pins), "byte limit"
    )


def test_a_pins_file_that_is_not_utf8(project):
    pins = project / "checksums.yaml"
    pins.write_bytes(b"pins:\n  # caf\xe9 latin-1\n  {}\n")

    _assert_refused_fast(
        lambda: opforge("--project", str(project), "pins", "list"),
        str(pins),
        "not UTF-8 text (byte 0xe9 at line 2)",
    )


def test_a_recipe_that_is_not_utf8(project):
    recipe = project / "recipes" / "latin.yaml"
    recipe.write_bytes(RECIPE.format(name="latin", extra="description: caf\xe9").encode("latin-1"))

    _assert_refused_fast(lambda: _validate(project), str(recipe), "not UTF-8 text")
