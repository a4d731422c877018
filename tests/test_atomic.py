"""No write of a project file is carried out of its folder by a symbolic link: a linked directory
on the way or a link in the file's place that leads out (or loops) is refused in one line, and
nothing is written outside. Each writer of project files is checked through its entry point."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from opforge.atomic import write_text
from opforge.ci.matrix import load_matrix
from opforge.ci.workflow import WORKFLOW_PATH, sync_workflow
from opforge.errors import ConfigError
from opforge.images.debian import lock_debs, toolkits
from opforge.images.devcontainer import DOCKERFILE
from opforge.images.devcontainer import main as devcontainer_main
from opforge.kernels.__main__ import main as kernels_main
from opforge.yamledit import find, render, rewrite_file
from tests.conftest import REPO
from tests.hostile.conftest import tree


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder and an empty folder outside it."""
    root, outside = tmp_path / "project", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    return root, outside


def _refused(call, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        call()
    assert "\n" not in raised.value.message and "\n" not in raised.value.hint
    for fragment in fragments:
        assert fragment in f"{raised.value.message} | {raised.value.hint}", raised.value
    return raised.value


def test_atomic_refuses_a_linked_directory_leading_out(places):
    root, outside = places
    (root / "generated").symlink_to(outside)
    error = _refused(
        lambda: write_text(root / "generated" / "include" / "ops.h", "x", root=root),
        "generated/include/ops.h leads out of",
        str(outside / "include" / "ops.h"),
        "remove the link generated:",
    )
    assert error.message.startswith("generated/include/ops.h ")
    assert tree(outside) == {}  # not even the directory on the way


def test_atomic_refuses_a_final_link_leading_out_and_keeps_it(places):
    root, outside = places
    (outside / "versions.yaml").write_text("theirs\n")
    (root / "versions.yaml").symlink_to(outside / "versions.yaml")
    _refused(
        lambda: write_text(root / "versions.yaml", "ours\n", root=root),
        "versions.yaml leads out of",
        "remove the link versions.yaml:",
    )
    assert (outside / "versions.yaml").read_text() == "theirs\n"
    assert (root / "versions.yaml").is_symlink()


def test_atomic_refuses_a_link_out_reached_through_a_link_inside(places):
    root, outside = places
    (root / "b").mkdir()
    (root / "b" / "out").symlink_to(outside)
    (root / "a").symlink_to("b")
    _refused(
        lambda: write_text(root / "a" / "out" / "f.txt", "x", root=root),
        "a/out/f.txt leads out of",
        "remove the link a/out:",
    )
    assert tree(outside) == {}


def test_atomic_follows_links_that_stay_inside(places):
    root, _ = places
    (root / "real").mkdir()
    (root / "alias").symlink_to("real")
    write_text(root / "alias" / "f.txt", "through a directory link\n", root=root)
    assert (root / "real" / "f.txt").read_text() == "through a directory link\n"
    # A link in the file's own place that stays inside is replaced, never written through.
    (root / "other.txt").write_text("keep me\n")
    (root / "f.txt").symlink_to("other.txt")
    write_text(root / "f.txt", "new\n", root=root)
    assert not (root / "f.txt").is_symlink() and (root / "f.txt").read_text() == "new\n"
    assert (root / "other.txt").read_text() == "keep me\n"


def test_atomic_accepts_a_root_that_is_itself_a_link(places, tmp_path):
    root, _ = places
    (tmp_path / "via").symlink_to(root)
    write_text(tmp_path / "via" / "sub" / "f.txt", "x\n", root=tmp_path / "via")
    assert (root / "sub" / "f.txt").read_text() == "x\n"


@pytest.mark.parametrize("where", ["directory", "file"])
def test_atomic_refuses_a_loop_of_links_in_one_line(places, where):
    root, _ = places
    if where == "directory":
        (root / "a").symlink_to("b")
        (root / "b").symlink_to("a")
        path, link = root / "a" / "f.txt", "a"
    else:
        (root / "f.txt").symlink_to("f.txt")
        path, link = root / "f.txt", "f.txt"
    error = _refused(lambda: write_text(path, "x", root=root), f"remove the link {link}:")
    assert error.message == f"{path.relative_to(root)} is a loop of symbolic links"


def test_atomic_refuses_dot_dot_out_of_the_root(places):
    root, outside = places
    error = _refused(
        lambda: write_text(root / ".." / "outside" / "f.txt", "x", root=root),
        "leads out of",
        f"only inside {root}",
    )
    assert "remove the link" not in error.hint
    assert tree(outside) == {}


def test_workflow_refuses_a_final_link_out_even_with_check(places):
    root, outside = places
    matrix = load_matrix(REPO / "ci" / "matrix.yaml", REPO / "images" / "versions.yaml")
    (outside / "nightly.yml").write_text("theirs\n")
    (root / WORKFLOW_PATH).parent.mkdir(parents=True)
    (root / WORKFLOW_PATH).symlink_to(outside / "nightly.yml")
    for check in (True, False):
        _refused(
            lambda check=check: sync_workflow(root, matrix, check=check),
            f"{WORKFLOW_PATH} leads out of",
            f"remove the link {WORKFLOW_PATH}:",
        )
    assert (outside / "nightly.yml").read_text() == "theirs\n"


def test_yamledit_refuses_a_linked_directory_out(places):
    root, outside = places
    shutil.copy(REPO / "images" / "versions.yaml", outside / "versions.yaml")
    (root / "images").symlink_to(outside)
    path = root / "images" / "versions.yaml"
    text = path.read_text()
    node = find(yaml.compose(text), "combinations", 0, "cuda")
    _refused(
        lambda: rewrite_file(path, text, [(node, render("99.9", node))], root=root),
        "images/versions.yaml leads out of",
        "remove the link images:",
    )
    assert (outside / "versions.yaml").read_text() == text


class _Archive:
    """Docker's client as ``lock_debs`` uses it: each container run prints one resolved package
    (no Docker engine needed to reach the write)."""

    LINE = "libcudart11.0 11.8.89~11.8.0-5~deb12u1 " + "a" * 64 + " 170000 pool/non-free/x.deb\n"

    def __init__(self) -> None:
        self.containers = self

    def run(self, image: str, command: list[str], **options) -> bytes:
        return self.LINE.encode()


def _images(root: Path) -> Path:
    images = root / "images"
    (images / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "images" / "versions.yaml", images / "versions.yaml")
    return images


def test_debian_locks_are_written_inside_and_refused_through_a_link_out(places):
    root, outside = places
    images = _images(root)
    cuda = toolkits(images / "versions.yaml")[0].cuda
    written = lock_debs(_Archive(), images, cuda, None, {}, say=lambda _: None, root=root)
    assert written and all(p.read_text().endswith(_Archive.LINE) for p in written)
    shutil.rmtree(images / "debian")
    (images / "debian").symlink_to(outside)
    _refused(
        lambda: lock_debs(_Archive(), images, cuda, None, {}, say=lambda _: None, root=root),
        "images/debian/",
        "remove the link images/debian:",
    )
    assert tree(outside) == {}


def _devcontainer_project(root: Path) -> None:
    (root / "checksums.yaml").write_text("{}\n")  # what marks a project root
    (root / "images").mkdir()
    shutil.copy(REPO / "images" / "Dockerfile.pip", root / "images" / "Dockerfile.pip")


def test_devcontainer_main_writes_the_dockerfile(places, monkeypatch):
    root, _ = places
    _devcontainer_project(root)
    monkeypatch.chdir(root)
    assert devcontainer_main([]) == 0
    assert (root / DOCKERFILE).read_text().startswith("# Generated from images/Dockerfile.pip")
    assert devcontainer_main(["--check"]) == 0


@pytest.mark.parametrize("link", ["directory", "file"])
def test_devcontainer_main_refuses_a_link_out_in_one_line(places, monkeypatch, capsys, link):
    root, outside = places
    _devcontainer_project(root)
    (outside / "Dockerfile").write_text("theirs\n")
    if link == "directory":
        (root / ".devcontainer").symlink_to(outside)
    else:
        (root / ".devcontainer").mkdir()
        (root / DOCKERFILE).symlink_to(outside / "Dockerfile")
    monkeypatch.chdir(root)
    for args in ([], ["--check"]):
        assert devcontainer_main(args) == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2, err
        assert err[0].startswith(f"opforge: error: {DOCKERFILE} leads out of")
        assert err[1].startswith("  hint: remove the link .devcontainer")
    assert tree(outside) == {"Dockerfile": b"theirs\n"}


def test_kernels_main_generates_inside_and_refuses_a_link_out(places, capsys):
    root, outside = places
    out_dir = root / "generated"
    table = REPO / "kernels" / "ops.yaml"
    assert kernels_main(["c", str(table), str(out_dir)]) == 0
    assert (out_dir / "include" / "opforge" / "ops.h").is_file()
    shutil.rmtree(out_dir / "include")
    (out_dir / "include").symlink_to(outside)
    assert kernels_main(["c", str(table), str(out_dir)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"opforge: error: include/opforge/ops.h leads out of {out_dir}, "
        f"to {outside.resolve() / 'opforge' / 'ops.h'}"
    )
    assert err[1].startswith("  hint: remove the link include:") and len(err) == 2
    assert tree(outside) == {}


def test_kernels_main_refuses_a_link_out_to_a_file_already_up_to_date(places, capsys):
    # Checked before reading: an outside file a link stands in for, holding the very text the
    # generator would write, must not pass as up to date (the build would compile it).
    root, outside = places
    out_dir = root / "generated"
    table = REPO / "kernels" / "ops.yaml"
    assert kernels_main(["c", str(table), str(out_dir)]) == 0
    header = out_dir / "include" / "opforge" / "ops.h"
    (outside / "ops.h").write_text(header.read_text())
    header.unlink()
    header.symlink_to(outside / "ops.h")
    assert kernels_main(["c", str(table), str(out_dir)]) == 1
    assert capsys.readouterr().err.startswith("opforge: error: include/opforge/ops.h leads out of")
    assert header.is_symlink()


def test_kernels_main_writes_into_an_output_directory_that_is_a_link(places):
    # The build tree may lie anywhere (OPFORGE_BUILD_DIR, a container's): only links below the
    # output directory are checked.
    root, outside = places
    (root / "generated").symlink_to(outside)
    assert kernels_main(["c", str(REPO / "kernels" / "ops.yaml"), str(root / "generated")]) == 0
    assert (outside / "include" / "opforge" / "ops.h").is_file()
