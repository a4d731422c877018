"""Hostile paths: recipe paths that leave the project or the install prefix, pin names and URL
file names that would become paths outside the cache or ``--dest``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import sha256
from tests.hostile.conftest import assert_one_line_error, dedent, opforge, pins_yaml, tree

RECIPE = dedent(
    """
    name: evil
    schema: 1
    sources: [src/**/*]
    cmake: {source_dir: src}
    profiles: {cpu: {}}
    outputs: [lib/x.so]
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A checkout in ``tmp_path/project`` with a sibling directory outside it."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "CMakeLists.txt").write_text("project(x NONE)\n")
    (root / "recipes").mkdir()
    (root / "checksums.yaml").write_text("pins: {}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "CMakeLists.txt").write_text("project(y NONE)\n")
    (outside / "secret.txt").write_text("not yours")
    return root


def _validate(project: Path, recipe: str):
    path = project / "recipes" / "evil.yaml"
    path.write_text(recipe)
    return path, opforge("--project", str(project), "recipes", "validate")


CASES = {
    "wheel root above the prefix": (
        lambda r: r + "wheel: {name: evil, root: ../../..}\n",
        "wheel.root: '../../..' leaves dist/<profile>",
    ),
    "absolute source glob": (
        lambda r: r.replace("[src/**/*]", "[/etc/*]"),
        "sources[0]: '/etc/*' is an absolute path",
    ),
    "source glob up and out": (
        lambda r: r.replace("[src/**/*]", "[../outside/*]"),
        "sources[0]: '../outside/*' leaves the project root",
    ),
    "empty source glob": (lambda r: r.replace("[src/**/*]", "['']"), "sources[0]: is empty"),
    "output glob up and out": (
        lambda r: r.replace("[lib/x.so]", "[../../../etc/passwd]"),
        "outputs[0]: '../../../etc/passwd' leaves dist/<profile>",
    ),
    "cmake source dir outside": (
        lambda r: r.replace("{source_dir: src}", "{source_dir: ../outside}"),
        "cmake.source_dir: '../outside' leaves the project root",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_recipe_paths_stay_inside(project, case):
    change, expected = CASES[case]

    path, result = _validate(project, change(RECIPE))

    assert_one_line_error(result, f"{path}: {expected}")


def test_a_source_glob_through_a_link_out_of_the_project(project, tmp_path):
    (project / "src" / "vendored").symlink_to(tmp_path / "outside")

    path, result = _validate(project, RECIPE)

    assert_one_line_error(
        result, f"{path}: sources[0]: src/vendored is a link to {tmp_path / 'outside'}"
    )


def test_a_source_glob_through_a_link_that_loops(project):
    (project / "src" / "again").symlink_to("..")

    path, result = _validate(project, RECIPE)

    assert_one_line_error(result, f"{path}: sources[0]: src/again is a link back to", "loop")


def test_a_source_glob_through_a_link_to_itself(project):
    (project / "src" / "self").symlink_to("self")

    path, result = _validate(project, RECIPE)

    assert_one_line_error(result, f"{path}: sources[0]: src/self is a loop of symbolic links")


def test_a_recipe_file_that_is_a_loop_of_links(project):
    (project / "recipes" / "a.yaml").symlink_to("a.yaml")

    result = opforge("--project", str(project), "recipes", "list")

    assert_one_line_error(result, f"{project / 'recipes' / 'a.yaml'}: a loop of symbolic links")


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_a_project_directory_that_is_a_loop_of_links(tmp_path, given):
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    if given == "flag":
        result = opforge("--project", str(loop), "pins", "list", cwd=tmp_path)
        name = "--project"
    else:
        result = opforge("pins", "list", cwd=tmp_path, env={"OPFORGE_PROJECT": str(loop)})
        name = "OPFORGE_PROJECT"

    assert_one_line_error(result, f"{name} {loop} is a loop of symbolic links")


def test_a_pin_name_that_is_a_path(tmp_path, file_server):
    body = b"payload"
    url = file_server.add("/x.tar.gz", body)
    pins = tmp_path / "pins.yaml"
    pins.write_text(
        f'pins:\n  "../../../escape-here/x":\n    url: {url}\n    sha256: {sha256(body)}\n'
    )
    cache = tmp_path / "a" / "b" / "cache"
    before = tree(tmp_path)

    result = opforge("pins", "fetch", "--pins", str(pins), "--cache", str(cache))

    assert_one_line_error(result, f"{pins}: pins: '../../../escape-here/x': not a valid pin name")
    assert tree(tmp_path) == before
    assert file_server.log == []


@pytest.mark.parametrize(
    ("url_path", "server_path", "expected"),
    [
        ("..%2F..%2Fescaped.whl", "..%2F..%2Fescaped.whl", "escaped.whl"),
        # requests decodes %2E, so the server sees '..'; the file name comes from the pin's URL.
        ("%2E%2E", "..", "evil"),
    ],
)
def test_a_url_file_name_that_is_a_path_stays_in_dest(
    tmp_path, file_server, url_path, server_path, expected
):
    body = os.urandom(1000)
    file_server.add(f"/files/{server_path}", body)
    url = file_server.url(f"/files/{url_path}")
    pins = pins_yaml(tmp_path / "pins.yaml", evil={"url": url, "sha256": sha256(body)})
    dest = tmp_path / "one" / "two" / "dest"

    result = opforge(
        "pins", "fetch", "--pins", str(pins), "--cache", str(tmp_path / "c"), "--dest", str(dest)
    )

    assert result.returncode == 0, result.stderr
    assert tree(dest) == {expected: body}
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["two"]
    assert sorted(p.name for p in (tmp_path / "one" / "two").iterdir()) == ["dest"]


def test_a_recipe_description_with_control_characters_is_listed_on_one_line(project):
    (project / "recipes" / "evil.yaml").write_text(
        RECIPE + 'description: "\\e]0;pwned\\a\\e[2J PyTorch\\nFAKE-LINE"\n'
    )

    result = opforge("--project", str(project), "recipes", "list")

    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert result.stdout.count("\n") == 1 and "\\x1b]0;pwned" in result.stdout


@pytest.mark.parametrize("kind", ["directory", "loop"])
def test_a_pins_file_that_is_no_file_is_named(tmp_path, kind):
    # It said no project was found, or that the project had no checksums.yaml.
    root = tmp_path / "p"
    root.mkdir()
    marker = root / "checksums.yaml"
    if kind == "directory":
        marker.mkdir()
    else:
        marker.symlink_to("checksums.yaml")
    said = "a directory" if kind == "directory" else "a loop of symbolic links"

    flagged = opforge("--project", str(root), "pins", "list", cwd=tmp_path)
    assert_one_line_error(flagged, f"{marker} (--project) is {said}")
    searched = opforge("pins", "list", cwd=root)
    assert_one_line_error(searched, f"{marker} is {said}, where an opforge project")


def test_a_folder_to_make_under_a_loop_of_links_is_said_to_be_one(tmp_path):
    from opforge.dirs import make_dirs
    from opforge.errors import ConfigError

    loop = tmp_path / "images"
    loop.symlink_to("images")
    with pytest.raises(ConfigError, match="is a loop of symbolic links") as info:
        make_dirs(loop / "pip-devel", hint="set OPFORGE_BUILD_DIR")
    assert info.value.hint == f"remove or repoint {loop}, or set OPFORGE_BUILD_DIR"


@pytest.mark.parametrize("name", ["/", "/etc", "../x", "a", "-x", "vol name", "x/y"])
def test_a_pip_cache_volume_that_is_a_path_is_refused(tmp_path, name):
    # Docker binds a volume "name" with a '/' as a host path: "/" put pip's cache, and the chmod
    # 1777 that opens a new volume up, on the host's root.
    from opforge.container.run import require_volume_name
    from opforge.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a Docker volume name") as info:
        require_volume_name(name)
    assert "OPFORGE_PIP_CACHE_VOLUME" in info.value.message and "unset it" in info.value.hint
    require_volume_name("opforge-pip-cache.2")  # a name: no error


def test_a_pip_cache_volume_that_is_a_path_is_refused_before_any_image_is_built(tmp_path):
    # It was refused only once the devel image had been built, a wait of minutes for nothing.
    repo = Path(__file__).resolve().parents[2]
    result = opforge(
        "--project",
        str(repo),
        "build",
        "--runner",
        "docker",
        "kernels",
        env={"OPFORGE_PIP_CACHE_VOLUME": "/", "OPFORGE_CACHE": str(tmp_path / "cache")},
    )
    assert_one_line_error(result, "OPFORGE_PIP_CACHE_VOLUME='/' is not a Docker volume name")
    assert "[docker]" not in result.stdout and "building" not in result.stdout
