"""The pins file: validation, cache verification, and ``pins update`` rewriting one pin only."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time

import pytest

from opforge.errors import ConfigError, DigestMismatch, PinError
from opforge.pins.cache import CacheState
from opforge.pins.fetch import Fetcher, FetchSettings
from opforge.pins.model import Pin, load_pins
from opforge.pins.rewrite import rewrite_pin
from opforge.pins.update import update_pin
from tests.conftest import REPO, run_opforge, sha256, write_pins

GOOD = "a" * 64


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("pins:\n  x:\n    url: http://h/x\n", r"pins\.x\.sha256: expected 64 lowercase hex"),
        (f"pins:\n  x:\n    url: http://h/x\n    sha256: {'A' * 64}\n", r"pins\.x\.sha256"),
        (
            f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n    sha1: abc\n",
            r"pins\.x\.sha1: unknown key",
        ),
        (f"pins:\n  x:\n    sha256: {GOOD}\n", r"pins\.x: give exactly one of url or urls"),
        (
            f"pins:\n  x:\n    url: ftp://h/x\n    sha256: {GOOD}\n",
            r"pins\.x\.url: expected http\(s\)",
        ),
        (f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n    md5: zz\n", r"pins\.x\.md5"),
        (f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n    size: -1\n", r"pins\.x\.size"),
        (
            f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n    size: {10**29}\n",
            r"pins\.x\.size: expected a byte count up to 2\*\*40",
        ),
        ("pins:\n  x: [1, 2]\n", r"pins\.x: expected a mapping"),
        ("pinz: {}\n", r"expected a top-level `pins:` mapping"),
        ("pins:\n  x: {url: [unclosed\n", r"not valid YAML at line \d+"),
        (
            f"pins:\n  ../x:\n    url: http://h/x\n    sha256: {GOOD}\n",
            r"'\.\./x': not a valid pin",
        ),
        (f"pins:\n  .x:\n    url: http://h/x\n    sha256: {GOOD}\n", r"'\.x': not a valid pin"),
        (f"pins:\n  a b:\n    url: http://h/x\n    sha256: {GOOD}\n", r"'a b': not a valid pin"),
        (f"pins:\n  1:\n    url: http://h/x\n    sha256: {GOOD}\n", r"1: a pin name must be text"),
        # A key given twice is refused, not resolved silently to the last one.
        (
            f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n"
            f"  x:\n    url: http://h/y\n    sha256: {'b' * 64}\n",
            r"duplicate key 'x' at line 5 \(first at line 2\)",
        ),
        (
            f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n    sha256: {'b' * 64}\n",
            r"duplicate key 'sha256' at line 5 \(first at line 4\)",
        ),
        ("pins: {}\npins: {}\n", r"duplicate key 'pins' at line 2 \(first at line 1\)"),
        # Keys of several types (YAML reads 1 as a number) are named, not compared.
        ("pins: {}\n1: x\nb: y\n", r"checksums\.yaml: 1: unknown top-level key"),
        ("pins:\n  x: {1: a, b: c}\n", r"pins\.x\.1: unknown key"),
    ],
)
def test_malformed_pins_name_file_and_key(tmp_path, body, expected):
    path = tmp_path / "checksums.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=expected) as info:
        load_pins(path)
    assert str(path) in str(info.value)


def test_a_rewrite_refuses_a_pin_given_twice_and_leaves_the_file(tmp_path):
    path = tmp_path / "checksums.yaml"
    body = f"pins:\n  x:\n    url: http://h/x\n    sha256: {GOOD}\n  x:\n    sha256: {GOOD}\n"
    path.write_text(body)
    with pytest.raises(ConfigError, match=r"duplicate key 'x' at line 5 \(first at line 2\)"):
        rewrite_pin(path, "x", {"sha256": "b" * 64})
    assert path.read_text() == body


def test_missing_pins_file_has_a_hint(tmp_path):
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_pins(tmp_path / "nope.yaml")
    assert "--pins" in info.value.hint


def test_project_pins_file_is_valid_and_pins_the_cuda_13_wheels():
    pins = load_pins(REPO / "checksums.yaml").pins
    for name in (
        "nvidia-cuda-nvcc",
        "nvidia-cuda-runtime",
        "nvidia-cuda-cccl",
        "nvidia-cudnn-cu13",
    ):
        assert name in pins
    # Transitive CUDA wheels pinned to the same release as nvcc (13.5's nvvm broke ptxas).
    for name in ("nvidia-nvvm", "nvidia-cuda-crt"):
        assert "-13.0.88-" in pins[name].filename


def test_unknown_pin_name_lists_known_ones(tmp_path):
    path = write_pins(
        tmp_path / "p.yaml", f"pins:\n  one:\n    url: http://h/one\n    sha256: {GOOD}\n"
    )
    with pytest.raises(PinError, match="unknown pin 'two'") as info:
        load_pins(path).select(["two"])
    assert "one" in info.value.hint


def test_verify_reports_missing_and_removes_corrupt(file_server, fetcher, cache):
    body = os.urandom(10_000)
    url = file_server.add("/f", body)
    path = write_pins(
        cache.root.parent / "p.yaml",
        f"pins:\n  good:\n    url: {url}\n    sha256: {sha256(body)}\n"
        f"  absent:\n    url: {url}x\n    sha256: {GOOD}\n",
    )
    pins = load_pins(path).pins
    cached = fetcher.fetch(pins["good"])
    assert cache.verify(pins["good"]).state is CacheState.OK
    assert cache.verify(pins["absent"]).state is CacheState.MISSING
    cached.chmod(0o644)
    cached.write_bytes(b"bit rot")
    result = cache.verify(pins["good"])
    assert result.state is CacheState.CORRUPT
    assert result.actual["sha256"] == sha256(b"bit rot")
    assert not cached.exists(), "a corrupt file must not stay usable in the cache"


PINS_TEMPLATE = """\
# Header comment that must survive.
pins:
  # the one we update
  wheel:
    url: {url}
    sha256: {sha}   # trailing comment
    md5: {md5}
    size: {size}
  other:   # untouched
    url: http://example.invalid/other.tar.gz
    sha256: "{other}"
"""


def _write_template(path, url, sha, md5="ab" * 16, size=1):
    path.write_text(PINS_TEMPLATE.format(url=url, sha=sha, md5=md5, size=size, other=GOOD))
    return path


def test_update_rewrites_only_that_pins_digests(file_server, fetcher, tmp_path):
    body = os.urandom(20_000)
    filename = "demo_pkg-1.0-py3-none-any.whl"
    url = file_server.add(f"/files/{filename}", body)
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD)
    original = path.read_text()
    result = update_pin(path, "wheel", fetcher)
    assert result.changed and result.new.sha256 == sha256(body)
    expected = original.replace(GOOD, sha256(body), 1)
    expected = expected.replace("ab" * 16, hashlib.md5(body).hexdigest())
    expected = expected.replace("size: 1\n", f"size: {len(body)}\n")
    assert path.read_text() == expected, "comments, order and the other pin stay byte for byte"
    assert load_pins(path).pins["wheel"].sha256 == sha256(body)
    assert fetcher.cache.has(result.new), "the re-pinned file is cached under its new digest"


def test_update_follows_a_link_to_a_pins_file_in_its_folder(file_server, fetcher, tmp_path):
    body = os.urandom(2_000)
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", body)
    (tmp_path / "pins").mkdir()
    target = _write_template(tmp_path / "pins" / "2026.yaml", url, GOOD)
    link = tmp_path / "checksums.yaml"
    link.symlink_to(target)
    update_pin(link, "wheel", fetcher)
    assert link.is_symlink() and load_pins(target).pins["wheel"].sha256 == sha256(body)


def test_update_refuses_a_link_out_of_the_pins_files_folder_before_downloading(
    file_server, fetcher, tmp_path
):
    body = os.urandom(2_000)
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", body)
    outside = _write_template(tmp_path / "outside.yaml", url, GOOD)
    before = outside.read_text()
    project = tmp_path / "project"
    project.mkdir()
    (project / "checksums.yaml").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"^checksums\.yaml leads out of ") as info:
        update_pin(project / "checksums.yaml", "wheel", fetcher)
    assert info.value.hint.startswith("remove the link checksums.yaml")
    assert outside.read_text() == before
    assert file_server.log == [], "nothing is downloaded for a file that cannot be written"


def test_update_fills_an_unset_digest(file_server, fetcher, tmp_path):
    body = b"new input"
    url = file_server.add("/new.tar.gz", body)
    path = write_pins(tmp_path / "p.yaml", f'pins:\n  fresh:\n    url: {url}\n    sha256: ""\n')
    with pytest.raises(ConfigError):
        load_pins(path)
    update_pin(path, "fresh", fetcher)
    assert load_pins(path).pins["fresh"].sha256 == sha256(body)


@pytest.mark.parametrize("digest", ["abc", "A" * 64, "12345", "~"])
def test_update_replaces_a_malformed_digest_of_the_pin_it_updates(
    file_server, fetcher, tmp_path, digest
):
    # The load error for such a digest says to run `pins update NAME`: that must work.
    body = os.urandom(2_000)
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", body)
    path = _write_template(tmp_path / "checksums.yaml", url, digest, md5="not-an-md5")
    with pytest.raises(ConfigError, match=r"pins\.wheel\.sha256: ") as info:
        load_pins(path)
    assert "opforge pins update wheel" in info.value.hint
    result = update_pin(path, "wheel", fetcher)
    assert result.changed
    pin = load_pins(path).pins["wheel"]
    assert (pin.sha256, pin.md5) == (sha256(body), hashlib.md5(body).hexdigest())


@pytest.mark.parametrize("indicator", ["|", "|-", ">", ">-", "|+"])
def test_update_replaces_a_digest_written_as_a_block_scalar(
    file_server, fetcher, tmp_path, indicator
):
    # The block's span ends after its line break: the key below it kept its own line only once
    # the replacement put the break back (it was joined to the digest's line, and the file no
    # longer loaded).
    body = os.urandom(3_000)
    url = file_server.add("/files/block.tar.gz", body)
    path = write_pins(
        tmp_path / "p.yaml",
        f"pins:\n  p:\n    url: {url}\n    sha256: {indicator}\n      x\n\n    size: 2\n"
        f"  q:\n    url: {url}\n    sha256: {GOOD}\n",
    )
    update_pin(path, "p", fetcher)
    pins = load_pins(path).pins
    assert (pins["p"].sha256, pins["p"].size) == (sha256(body), len(body))
    assert pins["q"].sha256 == GOOD


def test_update_of_a_digest_given_as_a_list_says_what_to_write(fetcher, tmp_path):
    path = _write_template(tmp_path / "checksums.yaml", "http://h/x.whl", "[1, 2]")
    with pytest.raises(ConfigError, match=r"pins\.wheel\.sha256: expected a digest") as info:
        update_pin(path, "wheel", fetcher)
    assert info.value.hint.startswith('write `sha256: ""` in its place')


def test_update_still_checks_the_other_pins(file_server, fetcher, tmp_path):
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", b"x")
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD)
    path.write_text(path.read_text().replace(f'"{GOOD}"', '"abc"'))
    before = path.read_text()
    with pytest.raises(ConfigError, match=r"pins\.other\.sha256: expected 64 lowercase hex"):
        update_pin(path, "wheel", fetcher)
    assert path.read_text() == before
    assert file_server.log == [], "nothing was downloaded"


def test_cli_update_of_a_malformed_digest_records_the_served_one(file_server, tmp_path):
    body = os.urandom(2_000)
    url = file_server.add("/new.tar.gz", body)
    path = write_pins(tmp_path / "p.yaml", f"pins:\n  p:\n    url: {url}\n    sha256: abc\n")
    result = run_opforge(
        "pins", "update", "--pins", str(path), "--cache", str(tmp_path / "cache"), "p", timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"p: sha256 (none) -> {sha256(body)}" in result.stdout
    assert load_pins(path).pins["p"].sha256 == sha256(body)


def test_update_checks_the_package_index_digest(file_server, fetcher, tmp_path):
    body = os.urandom(5_000)
    filename = "demo_pkg-1.0-py3-none-any.whl"
    url = file_server.add(f"/files/{filename}", body)
    file_server.publish("demo-pkg", filename, body)
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD)
    text = path.read_text().replace(
        "    size: 1\n", f"    size: 1\n    index: {file_server.url('/simple')}\n"
    )
    path.write_text(text)
    result = update_pin(path, "wheel", fetcher)
    assert result.confirmed_by == file_server.url("/simple")
    assert ("GET", "/simple/demo-pkg/", None) in file_server.log


def test_update_refuses_when_the_index_disagrees(file_server, fetcher, tmp_path):
    served = os.urandom(5_000)
    filename = "demo_pkg-1.0-py3-none-any.whl"
    url = file_server.add(f"/files/{filename}", served)
    file_server.publish("demo-pkg", filename, b"what the index says it should be")
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD)
    path.write_text(
        path.read_text().replace(
            "    size: 1\n", f"    size: 1\n    index: {file_server.url('/simple')}\n"
        )
    )
    before = path.read_text()
    with pytest.raises(DigestMismatch, match=r"but the index .* lists"):
        update_pin(path, "wheel", fetcher)
    assert path.read_text() == before, "the pins file is untouched"
    assert [p for p in fetcher.cache.root.rglob("*") if p.is_file()] == [], "nothing cached"


def _indexed_template(tmp_path, file_server, url):
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD)
    path.write_text(
        path.read_text().replace(
            "    size: 1\n", f"    size: 1\n    index: {file_server.url('/simple')}\n"
        )
    )
    return path


@pytest.mark.parametrize(
    "page",
    [
        b'{"files": ["x", 1]}',
        b'{"files": [{"filename": "demo_pkg-1.0-py3-none-any.whl", "hashes": ["a"]}]}',
        b'{"files": {"a": 1}}',
        b"[1, 2]",
        b"not json",
    ],
)
def test_update_names_an_index_page_that_is_not_the_json_simple_api(
    file_server, fetcher, tmp_path, page
):
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", b"x")
    file_server.add("/simple/demo-pkg/", page)
    path = _indexed_template(tmp_path, file_server, url)
    before = path.read_text()
    with pytest.raises(PinError, match=r"did not answer with the PEP 691 JSON simple API"):
        update_pin(path, "wheel", fetcher)
    assert path.read_text() == before


def test_update_takes_an_index_digest_in_upper_case(file_server, fetcher, tmp_path):
    body = os.urandom(1_000)
    filename = "demo_pkg-1.0-py3-none-any.whl"
    url = file_server.add(f"/files/{filename}", body)
    page = {"files": [{"filename": filename, "hashes": {"sha256": sha256(body).upper()}}]}
    file_server.add("/simple/demo-pkg/", json.dumps(page).encode())
    path = _indexed_template(tmp_path, file_server, url)
    assert update_pin(path, "wheel", fetcher).new.sha256 == sha256(body)


def test_update_asks_the_index_within_the_time_budget(file_server, cache, tmp_path):
    # The index page was read with no budget: a server trickling it held the update for hours.
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", b"x")
    file_server.add("/simple/demo-pkg/", b"{}", trickle_headers_s=0.1)
    path = _indexed_template(tmp_path, file_server, url)
    fetcher = Fetcher(cache, settings=FetchSettings(retries=0, deadline=1.0))
    started = time.monotonic()
    with pytest.raises(
        PinError, match=r"cannot ask the package index .*no whole answer within 1 s"
    ):
        update_pin(path, "wheel", fetcher)
    assert time.monotonic() - started < 5


def test_update_refuses_mirrors_that_serve_different_files(file_server, fetcher, tmp_path):
    # A fetch takes whichever mirror matches: a digest recorded from one bad mirror would make
    # every good one fail.
    first = file_server.add("/a/x.tar.gz", b"truncat")
    second = file_server.add("/b/x.tar.gz", b"truncated? no, whole")
    path = write_pins(
        tmp_path / "p.yaml", f"pins:\n  m:\n    urls: [{first}, {second}]\n    sha256: {GOOD}\n"
    )
    before = path.read_text()
    with pytest.raises(DigestMismatch, match=r"the mirrors serve different files"):
        update_pin(path, "m", fetcher)
    assert path.read_text() == before
    file_server.add("/a/x.tar.gz", b"truncated? no, whole")
    assert update_pin(path, "m", fetcher).new.sha256 == sha256(b"truncated? no, whole")


def test_update_of_unknown_pin_is_a_clear_error(fetcher, tmp_path):
    path = _write_template(tmp_path / "checksums.yaml", "http://h/x.whl", GOOD)
    with pytest.raises(PinError, match="unknown pin 'nope'"):
        update_pin(path, "nope", fetcher)


def _tiny_wheel(name: str = "opforge_probe", version: str = "1.0") -> bytes:
    """A minimal valid wheel holding one module."""
    import base64
    import hashlib as hl
    import io
    import zipfile

    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hl.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()
    )
    files[f"{name}-{version}.dist-info/RECORD"] = (
        record + f"{name}-{version}.dist-info/RECORD,,\n"
    ).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return buffer.getvalue()


def test_install_puts_a_verified_wheel_into_the_target(file_server, fetcher, tmp_path, monkeypatch):
    """pip takes the wheel through a link in the cache's tmp/, gone afterwards: no copy of it
    (a cuDNN wheel is 349 MB) and nothing in $TMPDIR, where a killed run left its copies."""
    from opforge.pins.install import install_wheels

    temp = tmp_path / "TMPDIR"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    body = _tiny_wheel()
    url = file_server.add("/files/opforge_probe-1.0-py3-none-any.whl", body)
    pin = load_pins(
        write_pins(
            tmp_path / "p.yaml", f"pins:\n  probe:\n    url: {url}\n    sha256: {sha256(body)}\n"
        )
    ).pins["probe"]
    assert install_wheels([pin], fetcher, tmp_path / "site") == [
        "opforge_probe-1.0-py3-none-any.whl"
    ]
    assert (tmp_path / "site" / "opforge_probe.py").read_text() == "VALUE = 42\n"
    assert list(fetcher.cache.tmp.iterdir()) == [] and list(temp.iterdir()) == []


def test_install_refuses_two_pins_of_one_wheel_file(file_server, fetcher, tmp_path):
    from opforge.pins.install import install_wheels

    body = _tiny_wheel()
    url = file_server.add("/files/opforge_probe-1.0-py3-none-any.whl", body)
    one, two = Pin("one", (url,), sha256(body)), Pin("two", (url,), sha256(body))
    with pytest.raises(
        PinError, match=r"pins one and two would both be given to pip as opforge_probe-1\.0"
    ):
        install_wheels([one, two], fetcher, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_a_killed_installs_links_are_swept_with_the_stale_partials(fetcher, tmp_path):
    """Only the links of a folder older than a day go, never what they point to; a fresh
    folder (a live install's) stays."""
    cache = fetcher.cache
    cache.ensure()
    kept = tmp_path / "blob"
    kept.write_bytes(b"cached")
    old, fresh = cache.tmp / "wheels-old", cache.tmp / "wheels-fresh"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "a-1.0-py3-none-any.whl").symlink_to(kept)
    # An old folder holding a regular file, and an old link to a folder of links: kept whole.
    holding = cache.tmp / "wheels-holding"
    holding.mkdir()
    (holding / "notes.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b-1.0-py3-none-any.whl").symlink_to(kept)
    (cache.tmp / "wheels-link").symlink_to(outside)
    day_ago = (time.time() - 2 * 24 * 3600,) * 2
    for path in (old, holding):
        os.utime(path, day_ago)
    os.utime(cache.tmp / "wheels-link", day_ago, follow_symlinks=False)
    cache.ensure()
    assert not old.exists() and fresh.is_dir() and kept.read_bytes() == b"cached"
    assert (holding / "notes.txt").read_text() == "mine"
    assert (outside / "b-1.0-py3-none-any.whl").is_symlink()


def test_install_refuses_a_tampered_wheel_and_a_non_wheel(file_server, fetcher, tmp_path):
    from opforge.pins.install import install_wheels

    url = file_server.add("/files/opforge_probe-1.0-py3-none-any.whl", _tiny_wheel(version="1.0"))
    tampered = Pin("probe", (url,), sha256(_tiny_wheel(version="2.0")))
    with pytest.raises(DigestMismatch):
        install_wheels([tampered], fetcher, tmp_path / "site")
    assert not (tmp_path / "site").exists()
    tarball = Pin("src", (file_server.add("/x.tar.gz", b"x"),), sha256(b"x"))
    with pytest.raises(PinError, match="pin src is not a wheel"):
        install_wheels([tarball], fetcher, tmp_path / "site")


@pytest.mark.parametrize(
    ("url", "filename"),
    [
        (
            "https://h/p/torch-2.13.0-cp311-linux_x86_64.whl?x=1#f",
            "torch-2.13.0-cp311-linux_x86_64.whl",
        ),
        ("https://h/p/a%20b.tar.gz", "a b.tar.gz"),
        ("https://h/p/..%2F..%2Fescape.whl", "escape.whl"),
        ("https://h/p/..%5C..%5Cescape.whl", "escape.whl"),
        ("https://h/p/%2E%2E", "the-pin"),
        ("https://h/p/.hidden", "the-pin"),
        ("https://h/p/", "the-pin"),
        ("https://h/p/a%0Ab", "the-pin"),
    ],
)
def test_file_names_from_urls_are_plain_base_names(url, filename):
    assert Pin("the-pin", (url,), GOOD).filename == filename


def test_verify_refuses_a_link_and_a_wrong_size_without_touching_the_target(
    file_server, fetcher, cache, tmp_path
):
    body = os.urandom(10_000)
    pin = Pin("blob", (file_server.add("/f", body),), sha256(body), size=len(body))
    cached = fetcher.fetch(pin)
    elsewhere = tmp_path / "good-copy"
    elsewhere.write_bytes(body)
    cached.unlink()
    cached.symlink_to(elsewhere)
    result = cache.verify(pin)
    assert (result.state, result.problem) == (
        CacheState.CORRUPT,
        "a symbolic link, not a regular file",
    )
    assert not cached.is_symlink() and elsewhere.read_bytes() == body
    cached.write_bytes(body[:10])
    assert cache.verify(pin).problem == f"10 bytes, expected {len(body)}"
    assert not cached.exists()


def test_update_is_not_limited_by_the_recorded_size(file_server, fetcher, tmp_path):
    body = os.urandom(20_000)
    url = file_server.add("/files/demo_pkg-1.0-py3-none-any.whl", body)
    path = _write_template(tmp_path / "checksums.yaml", url, GOOD, size=10)
    result = update_pin(path, "wheel", fetcher)
    assert result.new.size == len(body)
    assert load_pins(path).pins["wheel"].size == len(body)


def test_a_pins_file_that_cannot_be_written_gives_a_hint(
    file_server, fetcher, tmp_path, monkeypatch
):
    """`pins update` rewrites the pins file atomically; when the rename is refused (a read-only
    checkout, which root does not meet in a test) the error names the file and says what to check."""
    import opforge.atomic

    body = os.urandom(1_000)
    path = _write_template(tmp_path / "checksums.yaml", file_server.add("/w.whl", body), GOOD)

    def refuse(target, keep_mode=False):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(opforge.atomic, "replacing", refuse)
    with pytest.raises(ConfigError) as info:
        update_pin(path, "wheel", fetcher)
    assert info.value.message == f"cannot write {path}: Permission denied"
    assert (
        info.value.hint
        == f"check that {tmp_path} exists and you can write there (permissions, space)"
    )


def test_fetch_dest_places_copies_that_leave_the_cache_intact(
    file_server, fetcher, cache, tmp_path
):
    body = os.urandom(10_000)
    pin = Pin("blob", (file_server.add("/files/blob.whl", body),), sha256(body), size=len(body))
    cached = fetcher.fetch(pin)
    dest = tmp_path / "dest"
    dest.mkdir()
    # A hard link an earlier opforge placed there is replaced by a copy, not kept.
    os.link(cached, dest / "blob.whl")
    placed = cache.export(pin, dest)
    assert placed == dest / "blob.whl" and placed.read_bytes() == body
    assert not os.path.samefile(placed, cached)
    placed.write_bytes(b"edited by hand")
    assert cache.verify(pin).state is CacheState.OK, "editing the placed file left the cache"
    assert sorted(p.name for p in dest.iterdir()) == ["blob.whl"], "no temporary file left"
