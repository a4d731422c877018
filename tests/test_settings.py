"""Settings: every variable read in one place and documented; flags over the handoff over the
environment; the handoff round-trips; the package's import layers point one way."""

from __future__ import annotations

import ast
import re
import runpy
from pathlib import Path

import pytest
import yaml

from opforge.errors import ConfigError
from opforge.frameworks import MINDSPORE, TORCH
from opforge.handoff import Handoff
from opforge.settings import (
    ENVIRONMENT,
    PIP_CACHE_VOLUME,
    default_cache_dir,
    resolve_settings,
)
from tests.conftest import REPO

PACKAGE = REPO / "src" / "opforge"
# Lowest first; a module may import only from its own unit or a lower layer.
LAYERS = (
    {"hosts"},
    {
        "errors",
        "frameworks",
        "links",
        "logtail",
        "proxies",
        "redact",
        "requirements",
        "schema_errors",
    },
    {"atomic", "dirs", "dockerengine", "handoff", "locks", "paths", "pip", "report", "yamlfile"},
    {"kernels", "settings", "yamledit"},
    {"pins"},
    {"recipes"},
    {"project"},
    {"build", "images", "recipe_tests"},
    {"ci", "container", "doctor"},
    {"cli"},
    {"__main__"},
)


def _unit(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[str]:
    units = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        units |= {n.split(".")[1] for n in names if n.startswith("opforge.")}
    return units


def test_every_import_points_to_a_lower_layer():
    layer = {unit: i for i, units in enumerate(LAYERS) for unit in units}
    upward = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        unit = _unit(path)
        assert unit in layer, f"{path}: add {unit!r} to LAYERS"
        for target in _imported_units(path) - {unit}:
            if layer.get(target, -1) >= layer[unit]:
                upward.append(f"{path.relative_to(REPO)} -> opforge.{target}")
    assert not upward, upward


def test_only_yamlfile_loads_yaml():
    """Project files are read by one loader (size, aliases, nesting, duplicate keys); yamledit
    only checks that a scalar it rendered itself loads back as that value."""
    loads = ("load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all")
    callers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr in loads
        and isinstance(node.value, ast.Name)
        and node.value.id == "yaml"
    }
    assert callers == {"yamlfile.py", "yamledit.py"}


def test_only_settings_reads_variables():
    """The entry points (the CLI, ``python -m opforge.images.devcontainer``) hand os.environ to
    the settings and step processes (build steps, recipe tests) inherit it; nothing else reads
    the environment."""
    readers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
    }
    assert readers == {
        "cli/__init__.py",
        "images/devcontainer.py",
        "build/steps.py",
        "recipe_tests.py",
    }


def test_the_readme_table_is_every_variable():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \|", section, re.M)
    assert rows == list(ENVIRONMENT)


def test_flags_over_handoff_over_environment(tmp_path):
    environ = {
        "OPFORGE_CACHE": str(tmp_path / "env-cache"),
        "OPFORGE_BUILD_DIR": str(tmp_path / "env-build"),
        "BASE_IMAGE": "env-base",
        "PIP_CERT": "/etc/pip.pem",
        "PIP_FIND_LINKS": f"{tmp_path} {tmp_path / 'missing'}",
        "CXX": "g++-12",
        "https_proxy": "http://127.0.0.1:3128",
        "CI": "true",
    }
    plain = resolve_settings(environ, cwd=tmp_path)
    assert plain.cache_dir == tmp_path / "env-cache"
    assert plain.build_dir == tmp_path / "env-build"
    assert (plain.base_image, plain.extra_ca) == ("env-base", Path("/etc/pip.pem"))
    assert plain.find_links == (tmp_path,), "only folders that exist go into an image build"
    assert plain.tool_overrides == {"c++": "g++-12"}
    assert plain.proxies["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert (plain.progress, plain.image, plain.pip_cache_volume) == (
        False,
        "host",
        PIP_CACHE_VOLUME,
    )
    handoff = Handoff(tmp_path / "p", tmp_path / "h-cache", tmp_path / "h-build", "opforge/devel:x")
    inner = resolve_settings(environ, handoff=handoff, cwd=tmp_path)
    assert (inner.cache_dir, inner.build_dir, inner.image) == (
        tmp_path / "h-cache",
        tmp_path / "h-build",
        "opforge/devel:x",
    )
    assert inner.project_root() == tmp_path / "p"
    flagged = resolve_settings(
        environ, handoff=handoff, cache=str(tmp_path / "flag"), base_image="flag-base", cwd=tmp_path
    )
    assert (flagged.cache_dir, flagged.base_image) == (tmp_path / "flag", "flag-base")


def test_opforge_project_must_hold_a_checkout(tmp_path):
    settings = resolve_settings({"OPFORGE_PROJECT": str(tmp_path)}, cwd=REPO)
    with pytest.raises(ConfigError, match=r"has no checksums\.yaml") as info:
        settings.project_root()
    assert "OPFORGE_PROJECT" in info.value.hint
    assert resolve_settings({}, cwd=REPO / "src").project_root() == REPO


def test_relative_folders_are_the_current_directorys_and_blank_ones_unset(tmp_path):
    """A build runs its steps from the project root: a relative cache or build directory must
    already name one folder, the one under the directory opforge was started in."""
    here = tmp_path / "kernels"
    relative = resolve_settings(
        {"OPFORGE_CACHE": "relcache", "OPFORGE_BUILD_DIR": "relbuild"}, cwd=here
    )
    assert (relative.cache_dir, relative.build_dir) == (here / "relcache", here / "relbuild")
    flagged = resolve_settings({"OPFORGE_CACHE": "relcache"}, cache="../flag", cwd=here)
    assert flagged.cache_dir.is_absolute() and flagged.cache_dir.resolve() == tmp_path / "flag"
    blank = {"OPFORGE_CACHE": " ", "OPFORGE_BUILD_DIR": "\t", "OPFORGE_PROJECT": "  "}
    unset = resolve_settings(blank, cache=" ", cwd=REPO / "src")
    assert (unset.cache_dir, unset.build_dir) == (default_cache_dir(), None)
    assert unset.project_root() == REPO


def test_project_flag_must_hold_a_checkout_and_names_the_one_around_it():
    settings = resolve_settings({}, project="kernels", cwd=REPO)
    with pytest.raises(ConfigError) as info:
        settings.project_root()
    assert str(info.value) == f"--project {REPO / 'kernels'} has no checksums.yaml"
    assert info.value.hint == f"point --project at the checkout's root, {REPO}, or leave it out"


def test_the_handoff_round_trips_and_refuses_anything_else(tmp_path):
    handoff = Handoff(tmp_path, tmp_path / "cache", tmp_path / "build", "opforge/devel:tag")
    assert Handoff.from_json(handoff.to_json()) == handoff
    nested = "[" * 100_000 + "]" * 100_000  # deeper than the JSON parser recurses
    for text in (
        "{",
        "[]",
        '{"project": "/x"}',
        handoff.to_json().replace('"/', '"')[:-2] + "}",
        nested,
    ):
        with pytest.raises(ConfigError, match="--handoff: not a container handoff"):
            Handoff.from_json(text)


def test_framework_versions_have_one_home():
    """The noxfile, the MindSpore recipe and the CI matrix say what opforge.frameworks says."""
    nox = runpy.run_path(str(REPO / "noxfile.py"))
    assert (nox["TORCH"], nox["MINDSPORE"]) == (TORCH, MINDSPORE)
    recipe = yaml.safe_load((REPO / "recipes" / "mindspore-adapter.yaml").read_text())
    assert tuple(recipe["wheel"]["requires"]) == MINDSPORE
    matrix = yaml.safe_load((REPO / "ci" / "matrix.yaml").read_text())
    frameworks = {f["requirement"]: tuple(f.get("with", ())) for f in matrix["frameworks"]}
    assert frameworks == {"none": (), TORCH: (), MINDSPORE[0]: MINDSPORE[1:]}


def test_a_blank_base_image_counts_as_unset(tmp_path):
    # BASE_IMAGE=" " was a base image named " ", refused even for the ngc flavour that has none.
    assert resolve_settings({"BASE_IMAGE": " "}, cwd=tmp_path).base_image is None
    assert resolve_settings({"BASE_IMAGE": "deb:12"}, cwd=tmp_path).base_image == "deb:12"
