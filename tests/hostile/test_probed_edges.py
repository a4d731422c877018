"""Edges a hostile-input probe found: URLs urllib cannot split, a trailing newline in a digest,
a CA bundle naming nothing, FIFOs and non-UTF-8 text as project files, links inside the cache
and the project, `--dest` re-runs and name clashes, and hostile cell reports. Each ends in one
readable line (or the right result) and writes nothing where it should not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, sha256
from tests.hostile.conftest import assert_one_line_error, opforge, pins_yaml, tree


def _pin(url: str, body: bytes) -> dict:
    return {"url": f"'{url}'", "sha256": sha256(body), "size": len(body)}


@pytest.mark.parametrize(
    "url",
    ["http://[abc/x.whl", "http://127.0.0.1:99999/x.whl", "http://h/a b.whl", "http:///x.whl"],
)
def test_a_url_urllib_cannot_split_is_refused_when_the_pins_load(tmp_path, url):
    pins = pins_yaml(tmp_path / "pins.yaml", blob=_pin(url, b"x"))
    for command in (["list"], ["fetch", "blob"]):
        result = opforge("pins", *command, "--pins", str(pins), "--cache", str(tmp_path / "c"))
        assert_one_line_error(result, "pins.blob.url")
    assert not (tmp_path / "c").exists()


def test_control_characters_in_a_url_are_refused(tmp_path):
    (tmp_path / "pins.yaml").write_text(
        'pins:\n  blob:\n    url: "http://h/a\\e[2J\\rFAKE\\nc.whl"\n    sha256: ' + "0" * 64 + "\n"
    )
    result = opforge("pins", "list", "--pins", str(tmp_path / "pins.yaml"))
    assert_one_line_error(result, "control character")
    assert "\x1b" not in result.stderr


@pytest.mark.parametrize("key", ["name", "sha256"])
def test_a_trailing_newline_in_a_name_or_digest_is_refused(tmp_path, key):
    digest = "0" * 64
    name, value = ("blob\n", digest) if key == "name" else ("blob", digest + "\n")
    body = {"pins": {name: {"url": "http://h/x.whl", "sha256": value}}}
    (tmp_path / "pins.yaml").write_text(json.dumps(body))  # JSON is YAML: the escape survives
    result = opforge("pins", "list", "--pins", str(tmp_path / "pins.yaml"))
    assert_one_line_error(result, "pin name" if key == "name" else "64 lowercase hex digits")


def test_a_ca_bundle_naming_nothing_is_one_error_and_doctor_flags_it(tmp_path):
    pins = pins_yaml(tmp_path / "pins.yaml", blob=_pin("https://127.0.0.1:9/x.whl", b"x"))
    env = {"REQUESTS_CA_BUNDLE": str(tmp_path / "missing.pem")}
    result = opforge(
        "pins", "fetch", "blob", "--pins", str(pins), "--cache", str(tmp_path / "c"), env=env
    )
    line = assert_one_line_error(result, "pin blob", "missing.pem")
    assert "Traceback" not in result.stderr and line
    assert "REQUESTS_CA_BUNDLE" in result.stderr
    doctor = opforge("doctor", env=env)
    row = next(r for r in doctor.stdout.splitlines() if r.startswith("CA bundle"))
    assert "--" in row and "does not exist" in row


def test_a_fifo_as_the_pins_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pins.yaml"
    os.mkfifo(fifo)
    result = opforge("pins", "list", "--pins", str(fifo), timeout=30)
    assert_one_line_error(result, str(fifo), "not a regular file")


def test_a_directory_as_the_pins_file_has_a_hint(tmp_path):
    result = opforge("pins", "list", "--pins", str(tmp_path))
    assert_one_line_error(result, str(tmp_path), "a directory")
    assert "  hint: " in result.stderr


def _project_copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    subprocess.run(["git", "clone", "-q", str(REPO), str(project)], check=True)
    return project


@pytest.mark.parametrize(
    ("path", "command"),
    [
        ("ci/matrix.yaml", ["ci", "list"]),
        ("images/versions.yaml", ["images", "list"]),
        (".github/workflows/nightly.yml", ["ci", "render", "--check"]),
    ],
)
def test_project_files_that_are_not_utf8(tmp_path, path, command):
    project = _project_copy(tmp_path)
    target = project / path
    target.write_bytes(target.read_bytes() + b"# caf\xe9\n")
    result = opforge("--project", str(project), *command)
    if path.endswith("nightly.yml"):
        # Said as what it is, not as any other difference from the matrix's rendering.
        assert_one_line_error(result, "nightly.yml cannot be read: not UTF-8 text")
    else:
        assert_one_line_error(result, str(target), "not UTF-8")


def test_ci_render_does_not_write_through_a_link_out_of_the_project(tmp_path):
    project = _project_copy(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(project / ".github")
    (project / ".github").symlink_to(outside)
    result = opforge("--project", str(project), "ci", "render")
    assert_one_line_error(result, ".github/workflows/nightly.yml leads out of", str(outside))
    assert "  hint: remove the link .github: " in result.stderr
    assert tree(outside) == {}


def test_ci_render_refuses_a_loop_of_links(tmp_path):
    project = _project_copy(tmp_path)
    workflow = project / ".github" / "workflows" / "nightly.yml"
    workflow.unlink()
    workflow.symlink_to("nightly.yml")
    result = opforge("--project", str(project), "ci", "render")
    assert_one_line_error(result, "loop of symbolic links")


def test_a_build_record_that_is_a_link_out_is_refused_not_written_through(tmp_path):
    # Once replaced in silence; refused now, as every project file is, so the user learns of it.
    from opforge.build.record import BuildRecord
    from opforge.errors import ConfigError

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    record_path = tmp_path / "dist" / "build-record.json"
    record_path.parent.mkdir()
    record_path.symlink_to(outside)
    with pytest.raises(ConfigError, match=r"build-record\.json leads out of"):
        BuildRecord(record_path).save()
    assert outside.read_text() == "keep me\n"
    assert record_path.is_symlink()


def test_a_build_record_that_is_a_link_inside_dist_is_replaced_not_written_through(tmp_path):
    from opforge.build.record import BuildRecord

    other = tmp_path / "dist" / "other.json"
    other.parent.mkdir()
    other.write_text("keep me\n")
    record_path = tmp_path / "dist" / "build-record.json"
    record_path.symlink_to("other.json")
    BuildRecord(record_path).save()
    assert other.read_text() == "keep me\n"
    assert not record_path.is_symlink() and json.loads(record_path.read_text())["targets"] == {}


@pytest.mark.parametrize("pattern", [".", "./"])
def test_a_recipe_globbing_the_project_root_itself_is_refused(tmp_path, pattern):
    project = _project_copy(tmp_path)
    recipe = project / "recipes" / "kernels.yaml"
    text = recipe.read_text()
    recipe.write_text(text.replace("sources:\n", f"sources:\n  - '{pattern}'\n", 1))
    result = opforge("--project", str(project), "recipes", "validate")
    assert_one_line_error(result, "sources[0]", "names the directory itself")


def test_a_recipe_name_past_64_characters_is_refused(tmp_path):
    project = _project_copy(tmp_path)
    recipe = project / "recipes" / "torch-adapter.yaml"
    recipe.write_text(recipe.read_text().replace("name: torch-adapter", "name: " + "k" * 300, 1))
    result = opforge("--project", str(project), "recipes", "validate")
    assert_one_line_error(result, "name", "up to 64")


def test_a_link_through_a_link_in_the_project_is_still_checked(tmp_path):
    project = _project_copy(tmp_path)
    (project / "lk" / "b").mkdir(parents=True)
    (project / "lk" / "b" / "evil").symlink_to("/etc")
    (project / "lk" / "a").symlink_to("b")
    recipe = project / "recipes" / "kernels.yaml"
    recipe.write_text(recipe.read_text().replace("sources:\n", "sources:\n  - lk/a/*/passwd\n", 1))
    result = opforge("--project", str(project), "recipes", "validate")
    assert_one_line_error(result, "outside the project")


def test_a_link_below_a_linked_directory_is_checked(tmp_path):
    project = _project_copy(tmp_path)
    (project / "other").mkdir()
    (project / "other" / "evil.c").symlink_to("/etc/passwd")
    # Reached by the recipe's kernels/src/**/* through a link that itself stays inside.
    (project / "kernels" / "src" / "l").symlink_to("../../other")
    result = opforge("--project", str(project), "recipes", "validate")
    assert_one_line_error(result, "evil.c", "outside the project")


def test_pins_update_fills_an_empty_digest_as_valid_yaml(file_server, tmp_path):
    body = os.urandom(300)
    url = file_server.add("/blob.whl", body)
    pins = tmp_path / "pins.yaml"
    pins.write_text(f"pins:\n  blob:\n    url: {url}\n    sha256:\n    size: {len(body)}\n")
    result = opforge("pins", "update", "blob", "--pins", str(pins), "--cache", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    assert f"    sha256: {sha256(body)}\n" in pins.read_text()
    listed = opforge("pins", "list", "--pins", str(pins), "--cache", str(tmp_path / "c"))
    assert listed.returncode == 0, listed.stderr


def test_pins_update_through_a_link_keeps_the_link(file_server, tmp_path):
    body = os.urandom(300)
    url = file_server.add("/blob.whl", body)
    real = tmp_path / "real.yaml"
    real.write_text(f'pins:\n  blob:\n    url: {url}\n    sha256: ""\n')
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    result = opforge("pins", "update", "blob", "--pins", str(link), "--cache", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink()
    assert sha256(body) in real.read_text()


def test_a_linked_shard_directory_in_the_cache_is_not_followed(file_server, tmp_path):
    body = os.urandom(500)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=_pin(file_server.add("/b.whl", body), body))
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    (cache / "sha256").mkdir(parents=True)
    outside.mkdir()
    (cache / "sha256" / sha256(body)[:2]).symlink_to(outside)
    for command in ("fetch", "verify"):
        result = opforge("pins", command, "blob", "--pins", str(pins), "--cache", str(cache))
        assert_one_line_error(result, "symbolic link")
    assert tree(outside) == {}


def test_fetch_dest_reruns_leave_no_stray_files_and_clashing_names_are_refused(
    file_server, tmp_path
):
    body, other = os.urandom(400), os.urandom(400)
    long_name = "w" * 240 + ".whl"
    pins = pins_yaml(
        tmp_path / "pins.yaml",
        a=_pin(file_server.add(f"/x/{long_name}", body), body),
        b=_pin(file_server.add("/y/same.whl", other), other),
        c=_pin(file_server.add("/z/same.whl", body), body),
    )
    dest, cache = tmp_path / "dest", tmp_path / "cache"
    for _ in range(3):
        result = opforge(
            "pins",
            "fetch",
            "a",
            "b",
            "--pins",
            str(pins),
            "--cache",
            str(cache),
            "--dest",
            str(dest),
        )
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in dest.iterdir()) == sorted([long_name, "same.whl"])
    clash = opforge(
        "pins", "fetch", "b", "c", "--pins", str(pins), "--cache", str(cache), "--dest", str(dest)
    )
    assert_one_line_error(clash, "pins b and c", "same.whl")
    assert (dest / "same.whl").read_bytes() == other


def test_fetch_says_fetched_for_a_corrupt_cached_file_it_downloaded_again(file_server, tmp_path):
    body = os.urandom(400)
    pins = pins_yaml(tmp_path / "pins.yaml", blob=_pin(file_server.add("/b.whl", body), body))
    cache = tmp_path / "cache"
    first = opforge("pins", "fetch", "blob", "--pins", str(pins), "--cache", str(cache))
    assert first.returncode == 0, first.stderr
    blob = cache / "sha256" / sha256(body)[:2] / sha256(body)
    blob.chmod(0o644)
    blob.write_bytes(b"tampered")
    again = opforge("pins", "fetch", "blob", "--pins", str(pins), "--cache", str(cache))
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[1] == "fetched"
    cached = opforge("pins", "fetch", "blob", "--pins", str(pins), "--cache", str(cache))
    assert cached.stdout.split()[1] == "cached"


def test_hostile_cell_reports(tmp_path):
    reports = tmp_path / "reports"
    (reports / "c1").mkdir(parents=True)
    deep = reports / "c1" / "cell-record.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    assert_one_line_error(opforge("ci", "report", str(reports)), str(deep), "nested too deeply")
    deep.write_text(json.dumps({"status": "failed", "error": "boom \x1b[2J\x07 done"}))
    result = opforge("ci", "report", str(reports))
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "boom \\x1b[2J\\x07 done" in result.stdout


def test_a_deeply_nested_build_record_counts_as_damaged(tmp_path):
    project = _project_copy(tmp_path)
    (project / "dist").mkdir()
    (project / "dist" / "build-record.json").write_text("[" * 200_000 + "]" * 200_000)
    result = opforge("--project", str(project), "dist", "install")
    assert_one_line_error(result, "cannot be used: it is damaged (not the JSON a build writes)")
