"""Hostile cache states: poisoned blobs, wrong file types, read-only and full filesystems, links
inside the cache. A cached file is verified on every use; whatever is wrong is named."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher
from opforge.pins.model import load_pins
from tests.hostile.conftest import (
    assert_one_line_error,
    dedent,
    mount_tmpfs,
    opforge,
    pin_fields,
    pins_yaml,
    remount_read_only,
    tree,
)

BODY = os.urandom(200_000)


@pytest.fixture
def served(file_server, tmp_path: Path):
    """(pins file, cache, blob path) for one pin ``blob`` served by the loopback server."""
    url = file_server.add("/blob.tar.gz", BODY)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=pin_fields(url, BODY))
    cache = ContentCache(tmp_path / "cache")
    pin = load_pins(pins).pins["blob"]
    return pins, cache, cache.path_for(pin)


def _fetch_cli(pins: Path, cache: ContentCache, *extra: str):
    return opforge("pins", "fetch", "blob", "--pins", str(pins), "--cache", str(cache.root), *extra)


def _writable(blob: Path) -> None:
    blob.chmod(0o644)


def _flip_byte(blob: Path, elsewhere: Path) -> None:
    _writable(blob)
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0x01
    blob.write_bytes(bytes(data))


def _truncate(blob: Path, elsewhere: Path) -> None:
    _writable(blob)
    blob.write_bytes(blob.read_bytes()[:1000])


def _replace(blob: Path, elsewhere: Path) -> None:
    blob.unlink()
    blob.write_bytes(os.urandom(len(BODY)))


def _link_to_good_copy(blob: Path, elsewhere: Path) -> None:
    # Right bytes today, but a link can be changed under the cache at any time.
    elsewhere.write_bytes(BODY)
    blob.unlink()
    blob.symlink_to(elsewhere)


def _link_to_poison(blob: Path, elsewhere: Path) -> None:
    elsewhere.write_bytes(b"#define DLPACK_VERSION 666\n")
    blob.unlink()
    blob.symlink_to(elsewhere)


POISONS: dict[str, Callable[[Path, Path], None]] = {
    "flipped byte": _flip_byte,
    "truncated": _truncate,
    "replaced, same size": _replace,
    "symlink to a good copy": _link_to_good_copy,
    "symlink to poison": _link_to_poison,
}


@pytest.mark.parametrize("poison", POISONS, ids=list(POISONS))
def test_poisoned_cache_entry_is_removed_named_and_fetched_again(
    served, file_server, tmp_path, poison
):
    pins, cache, blob = served
    assert _fetch_cli(pins, cache).returncode == 0
    elsewhere = tmp_path / "outside-the-cache"
    POISONS[poison](blob, elsewhere)
    kept = elsewhere.read_bytes() if elsewhere.exists() else None

    result = _fetch_cli(pins, cache)

    assert result.returncode == 0, result.stderr
    assert f"cached file {blob} was corrupt" in result.stderr
    assert "removed it, downloading again" in result.stderr
    assert not blob.is_symlink() and blob.read_bytes() == BODY
    assert len(file_server.requests_for("/blob.tar.gz")) == 2
    if kept is not None:
        assert elsewhere.read_bytes() == kept, "a link's target is not the cache's to touch"


def test_offline_with_a_poisoned_entry_names_it_and_says_it_was_removed(served, file_server):
    pins, cache, blob = served
    assert _fetch_cli(pins, cache).returncode == 0
    _flip_byte(blob, blob)
    requests_before = len(file_server.log)

    error = assert_one_line_error(
        _fetch_cli(pins, cache, "--offline"), "pin blob", str(blob), "was corrupt", "removed"
    )

    assert "--offline" in error
    assert not blob.exists()
    assert len(file_server.log) == requests_before, "offline never touches the network"


@pytest.mark.parametrize("command", ["fetch", "verify"])
def test_a_wrong_size_in_the_pins_file_keeps_a_cached_file_whose_digests_match(
    served, file_server, tmp_path, command
):
    """The cache is shared by every pins file: one pin's wrong size must not cost the others a
    verified file (it was removed, and with --offline could not come back)."""
    pins, cache, blob = served
    assert _fetch_cli(pins, cache).returncode == 0
    url = file_server.add("/blob.tar.gz", BODY)
    wrong = pins_yaml(
        tmp_path / "wrong.yaml", blob={**pin_fields(url, BODY), "size": len(BODY) - 1}
    )
    requests_before = len(file_server.log)

    result = opforge(
        "pins", command, "blob", "--pins", str(wrong), "--cache", str(cache.root),
        *(["--offline"] if command == "fetch" else []),
    )  # fmt: skip

    error = assert_one_line_error(result, "pin blob", f"its size is {len(BODY) - 1}")
    assert f"has {len(BODY)} bytes" in error
    assert f"correct the size of blob in the pins file to {len(BODY)}" in result.stderr
    assert blob.read_bytes() == BODY
    assert len(file_server.log) == requests_before


def test_a_directory_where_a_blob_should_be_is_named_and_left_alone(served):
    pins, cache, blob = served
    blob.mkdir(parents=True)
    (blob / "someones-notes.txt").write_text("keep me")
    before = tree(cache.root)

    assert_one_line_error(_fetch_cli(pins, cache), str(blob), "is a directory")

    assert tree(cache.root) == before


def test_a_file_where_a_cache_directory_should_be_is_named_and_left_alone(served):
    pins, cache, blob = served
    blob.parent.parent.mkdir(parents=True)
    blob.parent.write_text("not a directory")
    before = tree(cache.root)

    assert_one_line_error(_fetch_cli(pins, cache), str(blob.parent), "is not a directory")

    assert tree(cache.root) == before


def test_a_linked_cache_tmp_is_refused_and_its_target_untouched(served, tmp_path):
    pins, cache, _blob = served
    elsewhere = tmp_path / "someone-elses-dir"
    elsewhere.mkdir()
    (elsewhere / "their-upload.part").write_text("two days of work")
    old = time.time() - 2 * 24 * 3600
    os.utime(elsewhere / "their-upload.part", (old, old))
    cache.root.mkdir()
    (cache.root / "tmp").symlink_to(elsewhere)
    before = tree(elsewhere)

    assert_one_line_error(_fetch_cli(pins, cache), str(cache.root / "tmp"), "symbolic link")

    assert tree(elsewhere) == before


def test_a_read_only_cache_missing_the_file_is_one_line(served, mount_point):
    pins, _cache, _blob = served
    mount_tmpfs(mount_point, "4m")
    cache = ContentCache(mount_point / "cache")
    cache.ensure()
    remount_read_only(mount_point)

    assert_one_line_error(_fetch_cli(pins, cache), str(cache.tmp), "Read-only file system")

    assert tree(cache.root) == {"sha256": "dir", "tmp": "dir"}


def test_a_read_only_cache_holding_a_poisoned_file_refuses_it(served, mount_point, file_server):
    pins, _cache, _blob = served
    mount_tmpfs(mount_point, "4m")
    cache = ContentCache(mount_point / "cache")
    pin = load_pins(pins).pins["blob"]
    blob = Fetcher(cache).fetch(pin)
    _flip_byte(blob, blob)
    remount_read_only(mount_point)

    assert_one_line_error(
        _fetch_cli(pins, cache), str(blob), "is corrupt", "cannot be removed", "Read-only"
    )


def test_pins_install_takes_wheels_from_a_read_only_cache(file_server, tmp_path, mount_point):
    """pip reads the wheels through links: where the cache's tmp/ cannot hold them (read-only,
    another user's) they go in $TMPDIR, and are gone afterwards."""
    from tests.test_pins import _tiny_wheel

    body = _tiny_wheel()
    url = file_server.add("/files/opforge_probe-1.0-py3-none-any.whl", body)
    pins = pins_yaml(tmp_path / "pins.yaml", probe=pin_fields(url, body))
    mount_tmpfs(mount_point, "4m")
    cache = ContentCache(mount_point / "cache")
    Fetcher(cache).fetch(load_pins(pins).pins["probe"])
    remount_read_only(mount_point)
    temp = tmp_path / "TMPDIR"
    temp.mkdir()
    site = tmp_path / "site"

    result = opforge(
        "pins", "install", "probe", "probe", "--pins", str(pins), "--cache", str(cache.root),
        "--offline", "--target", str(site), env={"TMPDIR": str(temp)},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout == "installed opforge_probe-1.0-py3-none-any.whl\n"
    assert (site / "opforge_probe.py").read_text() == "VALUE = 42\n"
    assert list(temp.iterdir()) == []


def test_a_full_disk_is_one_line_and_the_partial_is_freed(file_server, tmp_path, mount_point):
    mount_tmpfs(mount_point, "2m")
    body = os.urandom(3 << 20)
    url = file_server.add("/big.whl", body)
    pins = pins_yaml(tmp_path / "pins.yaml", big=pin_fields(url, body))
    cache = mount_point / "cache"

    result = opforge("pins", "fetch", "big", "--pins", str(pins), "--cache", str(cache))

    assert_one_line_error(result, "pin big", "No space left on device")
    assert tree(cache) == {"sha256": "dir", "tmp": "dir"}, "the partial is removed, space freed"


def _copy_project(root: Path, url: str) -> Path:
    """A one-recipe project whose build installs its pinned file as-is."""
    (root / "recipes").mkdir(parents=True)
    pins_yaml(root / "checksums.yaml", header=pin_fields(url, BODY))
    (root / "src").mkdir()
    (root / "src" / "CMakeLists.txt").write_text(
        dedent(
            """
            cmake_minimum_required(VERSION 3.20)
            project(installs_pin NONE)
            install(FILES ${OPFORGE_PIN_HEADER} DESTINATION include RENAME pinned.h)
            """
        )
    )
    (root / "recipes" / "pinned.yaml").write_text(
        dedent(
            """
            name: pinned
            schema: 1
            sources: [src/CMakeLists.txt]
            pins: [header]
            cmake: {source_dir: src}
            profiles: {cpu: {}}
            outputs: [include/pinned.h]
            """
        )
    )
    return root


@pytest.mark.slow
def test_a_poisoned_cache_entry_never_reaches_dist(file_server, tmp_path):
    project = _copy_project(tmp_path / "project", file_server.add("/dlpack.h", BODY))
    cache = ContentCache(tmp_path / "cache")
    build = ("--project", str(project), "build", "--profile", "cpu", "--cache", str(cache.root))
    first = opforge(*build)
    assert first.returncode == 0, first.stdout + first.stderr
    blob = cache.path_for(load_pins(project / "checksums.yaml").pins["header"])
    _link_to_poison(blob, tmp_path / "poison.h")
    with open(project / "src" / "CMakeLists.txt", "a") as cmakelists:
        cmakelists.write("# touched: the target rebuilds\n")

    second = opforge(*build)

    assert second.returncode == 0, second.stdout + second.stderr
    assert f"cached file {blob} was corrupt" in second.stderr
    assert (project / "dist" / "cpu" / "include" / "pinned.h").read_bytes() == BODY


def test_list_does_not_call_a_file_under_a_linked_shard_cached(served, tmp_path):
    # pins list said `cached` where verify and fetch refuse the linked shard directory.
    pins, cache, blob = served
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / blob.name).write_bytes(BODY)
    blob.parent.parent.mkdir(parents=True)
    blob.parent.symlink_to(elsewhere)
    pin = load_pins(pins).pins["blob"]
    assert not cache.has(pin) and cache.holds_entry(pin)
    listed = opforge("pins", "list", "--pins", str(pins), "--cache", str(cache.root))
    assert listed.returncode == 0 and " damaged " in listed.stdout
