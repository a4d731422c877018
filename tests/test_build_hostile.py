"""Builds and dist installs against hostile or broken surroundings: links planted where opforge
writes, a dist/ it cannot write, option values CMake cannot keep, tampered build records,
missing tools. Each is refused in one line, and nothing outside the project is touched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from opforge.build.cmake import cmake_value
from opforge.build.dist import dist_wheels
from opforge.build.record import BuildRecord
from opforge.errors import BuildError
from opforge.project import Project
from tests.conftest import run_opforge
from tests.test_build import LIB_CMAKE, PY_CMAKE, PY_RECIPE, opforge

pytestmark = pytest.mark.slow

LIB_RECIPE = """\
name: lib
schema: 1
sources: ["lib/*"]
cmake: {source_dir: lib, options: {CMAKE_BUILD_TYPE: Release}}
profiles: {cpu: {}}
outputs: [lib/liblib.so]
"""


def one_line_error(result: subprocess.CompletedProcess, code: int = 1) -> str:
    """The error line of a refused command, after checking it is one line plus a hint."""
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("opforge: error: "), result.stderr
    assert len(lines) == 2 and lines[1].startswith("  hint: "), result.stderr
    return result.stderr


@pytest.fixture
def lib_project(tmp_path) -> Path:
    """A project of one small C++ library target, not built yet."""
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "lib").mkdir()
    (root / "lib" / "CMakeLists.txt").write_text(LIB_CMAKE.format(name="lib"))
    (root / "lib" / "lib.cpp").write_text("int lib_value() { return 1; }\n")
    (root / "recipes" / "lib.yaml").write_text(LIB_RECIPE)
    return root


def add_probe(root: Path, recipe: str = PY_RECIPE) -> None:
    """Add target ``probe``, which packages a Python module as a wheel, to the project."""
    (root / "recipes" / "probe.yaml").write_text(recipe)
    (root / "probe" / "probe").mkdir(parents=True)
    (root / "probe" / "CMakeLists.txt").write_text(PY_CMAKE)
    (root / "probe" / "probe" / "__init__.py").write_text("VALUE = 1\n")


@pytest.fixture
def wheel_and_lib(lib_project) -> Path:
    """``lib_project`` plus a target that builds a wheel (``probe``), both built."""
    add_probe(lib_project)
    result = opforge(lib_project, "build", "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    return lib_project


@pytest.mark.parametrize("folder", ["dist", "build"])
def test_a_lock_file_linked_out_is_refused_and_its_target_kept(lib_project, tmp_path, folder):
    assert opforge(lib_project, "build").returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock = lib_project / folder / ".opforge.lock"
    lock.unlink()
    lock.symlink_to(victim)
    # An up-to-date build, which writes nothing else, once truncated the victim.
    error = one_line_error(opforge(lib_project, "build"))
    assert f"{lock} is a symbolic link" in error
    assert f"hint: remove the link {lock}" in error
    assert victim.read_text() == "keep me\n"


def test_a_dist_that_cannot_be_written_is_one_line(lib_project):
    dist = lib_project / "dist"
    dist.mkdir()
    if subprocess.run(["chattr", "+i", str(dist)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        error = one_line_error(opforge(lib_project, "build"))
    finally:
        subprocess.run(["chattr", "-i", str(dist)], check=True)
    assert f"cannot create the build lock {dist / '.opforge.lock'}: " in error
    assert f"make {dist} writable for you" in error


@pytest.mark.parametrize("where", ["dist", "link to dist", "inside dist", "the project"])
def test_a_build_dir_overlapping_dist_is_refused_before_building(lib_project, tmp_path, where):
    """Its lock would be dist's own (the build once waited on itself, "another build"), and
    build trees would mix with the outputs."""
    dist = lib_project / "dist"
    dist.mkdir()
    link = tmp_path / "link"
    link.symlink_to(dist)
    build_dir = {
        "dist": dist,
        "link to dist": link,
        "inside dist": dist / "trees",
        "the project": lib_project,
    }[where]
    result = run_opforge(
        "--project", str(lib_project), "build", env={"OPFORGE_BUILD_DIR": str(build_dir)}
    )
    error = one_line_error(result)
    if where == "the project":
        assert f"the build directory {build_dir} holds the project, {lib_project}" in error
        assert "apart from the project's sources" in error
    else:
        assert f"the build directory {build_dir} overlaps the project's outputs, {dist}" in error
        assert f"hint: point OPFORGE_BUILD_DIR at a directory apart from {dist}" in error
    assert sorted(p.name for p in dist.iterdir()) == [], "nothing made, not even the folder"


@pytest.mark.parametrize("where", ["the project", "dist"])
def test_an_image_context_is_not_assembled_in_the_sources_or_outputs(lib_project, where):
    # It replaces what is at <build dir>/images/<flavour>-<kind>: with the project as the build
    # directory, that lay in the project's own images/ folder.
    shutil.copytree(Path(__file__).parents[1] / "images", lib_project / "images")
    (lib_project / "dist").mkdir()
    build_dir = lib_project if where == "the project" else lib_project / "dist"
    before = sorted(p.relative_to(lib_project) for p in lib_project.rglob("*"))
    result = run_opforge(
        "--project", str(lib_project), "images", "context", "--flavour", "pip",
        env={"OPFORGE_BUILD_DIR": str(build_dir)},
    )  # fmt: skip
    error = one_line_error(result)
    assert f"the build directory {build_dir} " in error
    assert sorted(p.relative_to(lib_project) for p in lib_project.rglob("*")) == before


def test_a_build_dir_another_checkout_configured_is_named_and_kept(lib_project, tmp_path):
    """One OPFORGE_BUILD_DIR for two checkouts: CMake refused the second's configure, whose
    cleanup then removed the first's cache, each build breaking the other's in turn."""
    other = tmp_path / "other"
    shutil.copytree(lib_project, other)
    env = {"OPFORGE_BUILD_DIR": str(tmp_path / "shared")}
    first = run_opforge("--project", str(lib_project), "build", env=env)
    assert first.returncode == 0, first.stderr
    tree = tmp_path / "shared" / "cpu" / "lib"
    cache = (tree / "CMakeCache.txt").read_text()
    error = one_line_error(run_opforge("--project", str(other), "build", env=env))
    assert (
        f"the build tree {tree} was configured from {lib_project / 'lib'}, not from "
        f"{other / 'lib'}: another checkout shares the build directory"
    ) in error
    assert f"hint: give each checkout its own OPFORGE_BUILD_DIR, or remove {tree}" in error
    assert (tree / "CMakeCache.txt").read_text() == cache
    again = run_opforge("--project", str(lib_project), "build", env=env)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stderr


def test_a_checkout_copied_with_its_build_tree_configures_afresh(lib_project, tmp_path):
    """Its build/ holds a CMake cache of the old place (CMake would refuse it): not another
    checkout sharing the directory, so the copy's own build configures afresh."""
    assert opforge(lib_project, "build").returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(lib_project, copy, symlinks=True)
    (copy / "lib" / "lib.cpp").write_text("int lib_value() { return 2; }\n")
    result = opforge(copy, "build")
    assert result.returncode == 0, result.stdout + result.stderr
    cache = (copy / "build" / "cpu" / "lib" / "CMakeCache.txt").read_text()
    assert f"CMAKE_HOME_DIRECTORY:INTERNAL={copy / 'lib'}" in cache


def test_a_dist_linked_out_of_the_project_is_refused(lib_project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (lib_project / "dist").symlink_to(elsewhere)
    error = one_line_error(opforge(lib_project, "build"))
    assert f"leads out of {lib_project}" in error
    assert "hint: remove the link dist: opforge does not write dist/cpu through it" in error
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("value", ["Release\\nX", "Release\\rX", "Rel\\u0000ease", "a\\u2028b"])
def test_an_option_value_cmake_cannot_keep_is_refused_before_building(lib_project, value):
    recipe = lib_project / "recipes" / "lib.yaml"
    recipe.write_text(recipe.read_text().replace("Release}", f'"{value}"}}'))
    for argv in (["recipes", "validate"], ["build"]):
        error = one_line_error(opforge(lib_project, *argv))
        assert f"{recipe}: cmake.options.CMAKE_BUILD_TYPE: recipe 'lib': value " in error
        assert "contains a line break or control character" in error
    assert not (lib_project / "build" / "cpu").exists()


def test_cmake_value_refuses_what_validation_refuses():
    assert cmake_value("A", True) == "ON" and cmake_value("A", 3) == "3"
    with pytest.raises(BuildError, match="CMake option A: value 'x\\\\ny' contains a line"):
        cmake_value("A", "x\ny")


def test_a_failed_configure_leaves_the_next_build_a_fresh_cache(lib_project):
    cmake_lists = lib_project / "lib" / "CMakeLists.txt"
    good = cmake_lists.read_text()
    cmake_lists.write_text(good + 'message(FATAL_ERROR "broken on purpose")\n')
    failed = opforge(lib_project, "build")
    assert failed.returncode == 1 and "step configure failed" in failed.stderr
    tree = lib_project / "build" / "cpu" / "lib"
    assert "broken on purpose" in (tree / "opforge-build.log").read_text()
    assert not (tree / "CMakeCache.txt").exists()
    cmake_lists.write_text(good)
    result = opforge(lib_project, "build")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tree / "CMakeCache.txt").is_file()


def test_every_missing_python_package_is_named_at_once(lib_project):
    add_probe(lib_project, PY_RECIPE.replace("[pytest]", "[no-such-package-a]"))
    (lib_project / "recipes" / "other.yaml").write_text(
        LIB_RECIPE.replace("name: lib", "name: other").replace(
            "outputs:", "python_packages: [no-such-package-b, no-such-package-a]\noutputs:"
        )
    )
    error = one_line_error(opforge(lib_project, "build"))
    first = error.splitlines()[0]
    assert first.startswith("opforge: error: 2 tools and packages missing: ")
    assert "python package no-such-package-a is not installed" in first
    assert "python package no-such-package-b is not installed" in first
    assert f"hint: {sys.executable} -m pip install no-such-package-" in error
    assert not (lib_project / "dist").exists(), "nothing started"


def test_dist_install_names_the_targets_that_have_wheels(wheel_and_lib):
    no_wheel = one_line_error(opforge(wheel_and_lib, "dist", "install", "lib"))
    assert "target lib builds no wheel" in no_wheel
    assert "hint: targets that build wheels: probe; targets with cpu wheels: probe" in no_wheel
    unknown = one_line_error(opforge(wheel_and_lib, "dist", "install", "nosuch"))
    assert "opforge: error: unknown target 'nosuch'" in unknown
    assert "known targets: lib, probe" in unknown
    assert "opforge build nosuch" not in unknown


def test_dist_install_refuses_a_wheel_that_is_not_what_the_build_wrote(wheel_and_lib, tmp_path):
    wheel = next((wheel_and_lib / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("opforge_probe/extra.py", "X = 1\n")
    site = tmp_path / "site"
    error = one_line_error(opforge(wheel_and_lib, "dist", "install", "--target", str(site)))
    assert f"{wheel} is not the wheel target probe's cpu build wrote" in error
    assert "hint: rebuild it: `opforge build probe --profile cpu`" in error
    assert not site.exists()
    rebuilt = opforge(wheel_and_lib, "build", "probe")
    assert "[probe] building" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr
    assert opforge(wheel_and_lib, "dist", "install", "--target", str(site)).returncode == 0


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_dist_install_refuses_a_recorded_wheel_that_is_a_link_or_a_folder(
    wheel_and_lib, tmp_path, kind
):
    # The link matches the record's sha256: only that it is a link tells it from the build's.
    wheel = next((wheel_and_lib / "dist").glob("*.whl"))
    outside = tmp_path / "outside.whl"
    shutil.move(wheel, outside)
    if kind == "link":
        wheel.symlink_to(outside)
    else:
        wheel.mkdir()
    site = tmp_path / "site"
    error = one_line_error(opforge(wheel_and_lib, "dist", "install", "--target", str(site)))
    said = (
        "is a link, not the wheel file the build wrote"
        if kind == "link"
        else "is in the build record but is not a file"
    )
    assert f"opforge: error: {wheel} {said}" in error
    assert "hint: remove it and rebuild it: `opforge build probe --profile cpu`" in error
    assert not site.exists()


@pytest.mark.parametrize("name", ["../../../x.whl", "sub/x.whl", "/tmp/x.whl", "x.whl\n.whl"])
def test_a_build_record_naming_a_wheel_outside_dist_is_refused(wheel_and_lib, tmp_path, name):
    outside = tmp_path / "x.whl"
    shutil.copy(next((wheel_and_lib / "dist").glob("*.whl")), outside)
    record_path = wheel_and_lib / "dist" / "build-record.json"
    record = json.loads(record_path.read_text())
    outputs = record["targets"]["probe"]["cpu"]["outputs"]
    key = next(k for k in outputs if k.startswith("wheel:"))
    outputs[f"wheel:{name}"] = outputs.pop(key)
    record_path.write_text(json.dumps(record))
    site = tmp_path / "site"
    for argv in (["dist", "install", "--target", str(site)], ["build"]):
        error = one_line_error(opforge(wheel_and_lib, *argv))
        assert f"{record_path}: output 'wheel:" in error
        assert "is not the file name of a wheel in" in error
        assert f"hint: the record was altered: remove {record_path} and build again" in error
    assert not site.exists()


@pytest.mark.parametrize("outputs", [None, ["x"], "x", {"wheel:x.whl": 1}])
def test_a_build_record_with_fields_of_other_types_counts_as_none(tmp_path, outputs):
    # `outputs: null` crashed dist install with an AttributeError; a damaged record only costs
    # a rebuild.
    record = {"recipe": "r", "profile": "cpu", "inputs_sha256": "x", "inputs": {}, "prefix": "p"}
    path = tmp_path / "build-record.json"
    path.write_text(
        json.dumps({"schema": 1, "targets": {"k": {"cpu": {**record, "outputs": outputs}}}})
    )
    assert BuildRecord(path).targets == {}
    path.write_text(json.dumps({"schema": 1, "targets": {"k": {"cpu": {**record}}}}))
    assert BuildRecord(path).get("k", "cpu").outputs == {}


def test_container_tests_take_no_wheels_only_where_none_was_built(wheel_and_lib):
    # The docker test runner tests wheel-less targets through opforge.kernels.abi; a recorded
    # wheel that changed since the build is an error there as for dist install, not left out.
    project = Project(wheel_and_lib, wheel_and_lib / "checksums.yaml")
    assert [w.name for w in dist_wheels(project, "cpu", none_ok=True)] == [
        w.name for w in (wheel_and_lib / "dist").glob("*.whl")
    ]
    wheel = next((wheel_and_lib / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("opforge_probe/extra.py", "X = 1\n")
    with pytest.raises(BuildError, match="is not the wheel target probe's cpu build wrote"):
        dist_wheels(project, "cpu", none_ok=True)
    (wheel_and_lib / "dist" / "build-record.json").unlink()
    assert dist_wheels(project, "cpu", none_ok=True) == []
    with pytest.raises(BuildError, match="no wheels recorded for profile cpu"):
        dist_wheels(project, "cpu")


@pytest.mark.parametrize("kind", ["folder", "link out"])
def test_a_build_record_place_that_cannot_be_written_stops_the_build_first(
    wheel_and_lib, tmp_path, kind
):
    # The refusal came after configure, build and install had written dist/cpu.
    record = wheel_and_lib / "dist" / "build-record.json"
    shutil.rmtree(wheel_and_lib / "dist")
    record.parent.mkdir()
    if kind == "folder":
        record.mkdir()
        said = f"{record} is a directory, where the build record is written"
    else:
        outside = tmp_path / "elsewhere.json"
        outside.write_text("{}")
        record.symlink_to(outside)
        said = "dist/build-record.json leads out of"
    error = one_line_error(opforge(wheel_and_lib, "build"))
    assert said in error
    assert not (wheel_and_lib / "dist" / "cpu").exists(), "nothing built"


def test_a_huge_build_record_counts_as_none(tmp_path):
    path = tmp_path / "build-record.json"
    with path.open("w") as f:
        f.write('{"schema": 1, "targets": {}, "pad": "')
        f.truncate(64 << 20)
    assert BuildRecord(path).targets == {}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{", "it is damaged (not the JSON a build writes)"),
        ("[]", "it is damaged (not the JSON a build writes)"),
        ('{"version": 99}', "it is not a version 1 build record"),
        (None, "is not a directory, so it holds no build outputs"),
    ],
    ids=["cut short", "a list", "another version", "dist a file"],
)
def test_dist_install_says_a_build_record_it_cannot_use_is_damaged(
    wheel_and_lib, tmp_path, content, said
):
    # It said "no wheels recorded for profile cpu", as if no build had run.
    dist = wheel_and_lib / "dist"
    if content is None:
        shutil.rmtree(dist)
        dist.write_text("not a folder")
    else:
        (dist / "build-record.json").write_text(content)
    site = tmp_path / "site"
    error = one_line_error(opforge(wheel_and_lib, "dist", "install", "--target", str(site)))
    assert said in error and "hint: " in error and "opforge build --profile cpu" in error
    assert not site.exists()
