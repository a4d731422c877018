"""The CLI as a user meets it: exit codes, one-line errors with hints, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opforge.errors import BuildError
from opforge.report import report
from tests.conftest import REPO, run_opforge, sha256, write_pins


def run(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """``opforge ARGS`` as a subprocess, in this checkout unless ``cwd`` says otherwise."""
    return run_opforge(*args, cwd=cwd, env=env)


def assert_user_error(result: subprocess.CompletedProcess, text: str) -> None:
    """Non-zero, the message on the first line, at most a hint after it, and no traceback."""
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("opforge: error: ") and text in lines[0], result.stderr
    assert all(line.startswith("  hint: ") for line in lines[1:]), result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def pins_file(tmp_path, file_server):
    body = os.urandom(40_000)
    url = file_server.add("/data.tar.gz", body)
    return write_pins(
        tmp_path / "pins.yaml", f"pins:\n  data:\n    url: {url}\n    sha256: {sha256(body)}\n"
    )


def test_help_lists_every_command():
    result = run("--help")
    assert result.returncode == 0
    for command in ("recipes", "pins", "build", "doctor"):
        assert command in result.stdout
    pins_help = run("pins", "fetch", "--help").stdout
    assert "--offline" in pins_help and "--cache" in pins_help and "--pins" in pins_help


def test_fetch_verify_list_through_the_cli(tmp_path, pins_file):
    cache = str(tmp_path / "cache")
    fetched = run("pins", "fetch", "--pins", str(pins_file), "--cache", cache)
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.startswith("data ") and "fetched" in fetched.stdout
    again = run("pins", "fetch", "--pins", str(pins_file), "--cache", cache)
    assert "cached" in again.stdout
    verified = run("pins", "verify", "--pins", str(pins_file), "--cache", cache)
    assert verified.returncode == 0 and "data" in verified.stdout and "ok" in verified.stdout
    listed = run("pins", "list", "--pins", str(pins_file), "--cache", cache)
    assert "cached" in listed.stdout and "data.tar.gz" in listed.stdout


def test_list_shows_a_cached_file_of_another_size_as_damaged(tmp_path, file_server):
    # A truncated entry was listed as "cached"; pins verify removes it, pins fetch replaces it.
    body = os.urandom(4_000)
    url = file_server.add("/data.tar.gz", body)
    pins = write_pins(
        tmp_path / "pins.yaml",
        f"pins:\n  data:\n    url: {url}\n    sha256: {sha256(body)}\n    size: {len(body)}\n",
    )
    cache = tmp_path / "cache"
    assert run("pins", "fetch", "--pins", str(pins), "--cache", str(cache)).returncode == 0
    entry = cache / "sha256" / sha256(body)[:2] / sha256(body)
    entry.chmod(0o644)
    entry.write_bytes(body[:10])
    listed = run("pins", "list", "--pins", str(pins), "--cache", str(cache))
    assert listed.stdout.split()[4] == "damaged", listed.stdout


@pytest.mark.parametrize("under", ["", "sub/folder"])
def test_fetch_refuses_a_file_as_dest_before_downloading(tmp_path, pins_file, file_server, under):
    afile = tmp_path / "afile"
    afile.write_text("kept\n")
    dest = afile / under if under else afile
    cache = str(tmp_path / "cache")
    result = run("pins", "fetch", "--pins", str(pins_file), "--cache", cache, "--dest", str(dest))
    shown = f" ({afile} is not)" if under else ""
    assert result.stderr.splitlines() == [
        f"opforge: error: --dest {dest} is not a directory{shown}",
        "  hint: give a folder to --dest (created when missing)",
    ]
    assert result.returncode == 1 and afile.read_text() == "kept\n"
    assert file_server.log == [], "nothing is downloaded for a place it cannot be put"


def test_verify_with_empty_cache_reports_missing(tmp_path, pins_file):
    result = run("pins", "verify", "--pins", str(pins_file), "--cache", str(tmp_path / "empty"))
    assert "data                   missing" in result.stdout
    assert_user_error(result, "1 of 1 pin(s) missing or corrupt")
    assert "opforge pins fetch data" in result.stderr


def test_offline_fetch_with_empty_cache(tmp_path, pins_file):
    """The hint's command fetches into the same cache from the same pins file and project."""
    cache = tmp_path / "c"
    result = run(
        "--project", str(tmp_path), "pins", "fetch", "--offline",
        "--pins", str(pins_file), "--cache", str(cache),
    )  # fmt: skip
    assert_user_error(result, "pin data: not in cache")
    assert (
        f"run `opforge --project={tmp_path} pins fetch data --pins={pins_file} --cache={cache}`"
        in result.stderr
    )


def test_unknown_pin(tmp_path, pins_file):
    result = run("pins", "fetch", "nope", "--pins", str(pins_file), "--cache", str(tmp_path / "c"))
    assert_user_error(result, "unknown pin 'nope'")
    assert "known pins: data" in result.stderr


def test_digest_mismatch_through_the_cli(tmp_path, file_server):
    url = file_server.add("/icu4j.jar", b"the real jar")
    pins = write_pins(
        tmp_path / "p.yaml", f"pins:\n  icu4j:\n    url: {url}\n    sha256: {'c' * 64}\n"
    )
    result = run("pins", "fetch", "--pins", str(pins), "--cache", str(tmp_path / "c"))
    assert_user_error(
        result,
        f"pin icu4j: sha256 mismatch for {url}: expected {'c' * 64}, got {sha256(b'the real jar')}",
    )
    assert "opforge pins update icu4j" in result.stderr


def test_404_through_the_cli(tmp_path, file_server):
    pins = write_pins(
        tmp_path / "p.yaml",
        f"pins:\n  gone:\n    url: {file_server.url('/x')}\n    sha256: {'d' * 64}\n",
    )
    result = run(
        "pins", "fetch", "--pins", str(pins), "--cache", str(tmp_path / "c"), "--retries", "0"
    )
    assert_user_error(result, "HTTP 404")


def test_update_through_the_cli(tmp_path, file_server):
    url = file_server.add("/t.tar.gz", b"v2")
    pins = write_pins(tmp_path / "p.yaml", f"pins:\n  t:\n    url: {url}\n    sha256: {'e' * 64}\n")
    result = run("pins", "update", "t", "--pins", str(pins), "--cache", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    assert f"t: sha256 {'e' * 64} -> {sha256(b'v2')}" in result.stdout
    offline = run("pins", "update", "t", "--offline", "--pins", str(pins))
    assert_user_error(offline, "pins update needs the network")


def test_malformed_pins_file(tmp_path):
    pins = tmp_path / "p.yaml"
    pins.write_text("pins:\n  x:\n    url: http://h/x\n    sha256: nope\n")
    assert_user_error(run("pins", "list", "--pins", str(pins)), f"{pins}: pins.x.sha256")


def test_a_pins_file_with_a_key_given_twice_is_refused(tmp_path):
    pins = tmp_path / "p.yaml"
    good, other = "a" * 64, "b" * 64
    pins.write_text(
        f"pins:\n  x:\n    url: http://h/x\n    sha256: {good}\n    sha256: {other}\n"
        f"  y:\n    url: http://h/y\n    sha256: {good}\n"
    )
    result = run("pins", "list", "--pins", str(pins))
    assert_user_error(result, f"{pins}: duplicate key 'sha256' at line 5 (first at line 4)")
    assert result.stdout == ""


def test_a_build_dir_that_is_a_file_is_one_clear_error(tmp_path):
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "CMakeLists.txt").write_text("project(x NONE)\n")
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "recipes").mkdir()
    (root / "recipes" / "x.yaml").write_text(
        "name: x\nschema: 1\nsources: [src/CMakeLists.txt]\ncmake: {source_dir: src}\n"
        "profiles: {cpu: {}}\noutputs: [lib/x.so]\n"
    )
    afile = tmp_path / "afile"
    afile.write_text("")
    for build_dir, why in ((afile, "it exists"), (afile / "sub", f"{afile} exists")):
        result = run("build", "x", cwd=root, env={"OPFORGE_BUILD_DIR": str(build_dir)})
        assert_user_error(
            result, f"cannot create directory {build_dir}: {why} and is not a directory"
        )
        assert f"hint: move {afile} away, or set OPFORGE_BUILD_DIR" in result.stderr
    assert not (root / "build").exists() and not (root / "dist").exists()


def test_outside_a_project(tmp_path):
    assert_user_error(run("recipes", "list", cwd=tmp_path), "no opforge project found")


def test_recipes_commands_on_this_project():
    listed = run("recipes", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("kernels ")
    shown = run("recipes", "show", "kernels")
    assert shown.returncode == 0 and "# " in shown.stdout and "schema: 1" in shown.stdout
    assert_user_error(run("recipes", "show", "nope"), "unknown target 'nope'")
    valid = run("recipes", "validate")
    assert valid.returncode == 0 and "valid: kernels" in valid.stdout


@pytest.mark.parametrize("given", ["recipes", "recipes/kernels.yaml", "./recipes/../recipes"])
def test_validate_reads_a_recipe_it_reaches_twice_once(given):
    # The project's own folder, or one of its files, given again: not "already defined".
    valid = run("recipes", "validate", given, "recipes")
    assert valid.returncode == 0, valid.stderr
    assert valid.stdout.startswith("3 recipe(s) valid: kernels, ")


def test_validate_refuses_paths_that_hold_no_recipe(tmp_path):
    (tmp_path / "notes.txt").write_text("no recipe here\n")
    assert_user_error(run("recipes", "validate", str(tmp_path)), "holds no recipe files (*.yaml)")
    assert_user_error(run("recipes", "validate", "/dev/zero"), "/dev/zero: not a regular file")
    empty = run("recipes", "validate", "")
    assert empty.returncode == 2
    assert empty.stderr.startswith("opforge: error: argument PATH: is empty; give a path\n")


def test_validate_names_the_broken_file_and_every_problem(tmp_path):
    bad = tmp_path / "extra.yaml"
    bad.write_text("name: extra\nschema: 1\n")
    result = run("recipes", "validate", str(bad))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"opforge: error: {bad}: cmake: required key is missing (and 3 more below)"
    assert lines[1:-1] == [
        f"  {bad}: {key}: required key is missing" for key in ("outputs", "profiles", "sources")
    ]
    assert lines[-1].startswith("  hint: ")


def test_build_of_unknown_target_or_profile():
    assert_user_error(run("build", "nope"), "unknown target 'nope'")
    bad_profile = run("build", "--profile", "tpu")
    assert bad_profile.returncode == 2 and "invalid choice: 'tpu'" in bad_profile.stderr


def test_doctor_reports_every_capability_and_masks_proxy_passwords():
    result = run("doctor", env={"HTTPS_PROXY": "http://alice:s3cret@127.0.0.1:3128"})
    assert result.returncode == 0, result.stderr
    for row in (
        "docker engine",
        "cmake",
        "ninja",
        "nvcc",
        "cuDNN",
        "GPU",
        "torch",
        "mindspore",
        "numpy for MindSpore",
        "proxies",
    ):
        assert any(line.startswith(row) for line in result.stdout.splitlines()), row
    assert "HTTPS_PROXY=http://alice:***@127.0.0.1:3128" in result.stdout
    assert "s3cret" not in result.stdout


def test_doctor_rows_show_control_characters_of_the_environment_as_codes():
    """A line break or escape sequence in a variable doctor echoes neither breaks its row nor
    reaches the terminal."""
    result = run("doctor", env={"HTTPS_PROXY": "http://h\n:1", "NO_PROXY": "*\x1b[2J"})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    rows = result.stdout.splitlines()
    assert any(r.startswith("proxies") and "http://h\\n:1" in r for r in rows), result.stdout


@pytest.mark.parametrize("host", ["tcp://host:notaport", "tcp://[::1"])
def test_doctor_says_a_docker_host_that_is_no_address_is_one(host):
    """The Docker SDK's own parse of DOCKER_HOST fails with ValueError: doctor's row says so."""
    result = run("doctor", env={"DOCKER_HOST": host})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("docker engine"))
    assert "DOCKER_HOST is no engine address" in row and "set DOCKER_HOST to" in row


def test_doctor_flags_numpy_2_in_a_mindspore_environment():
    from opforge.doctor import numpy_for_mindspore

    bad = numpy_for_mindspore("2.10.0", "2.4.1")
    assert not bad.ok
    assert (
        "numpy 2.4.1 with MindSpore 2.10.0" in bad.detail and "pip install 'numpy<2'" in bad.detail
    )
    assert numpy_for_mindspore("2.10.0", "1.26.4").ok
    assert numpy_for_mindspore(None, "2.4.1").ok
    assert not numpy_for_mindspore("2.10.0", None).ok


def test_doctor_shows_which_tools_a_build_will_use_and_why(tmp_path):
    import sysconfig

    from opforge.build.toolchain import find_tool

    wrapper = tmp_path / "my-c++"
    wrapper.write_text('#!/bin/sh\necho "my c++ 1.0"\n')
    wrapper.chmod(0o755)
    result = run("doctor", env={"CXX": str(wrapper)})
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert f"my c++ 1.0 ({wrapper}, from $CXX)" in rows["c++"]
    cmake = find_tool("cmake")
    assert cmake is not None
    assert f"{cmake.version} ({cmake.path}, from {cmake.origin})" in rows["cmake"]
    if cmake.path.parent == Path(sysconfig.get_path("scripts")):
        assert cmake.origin == "this Python's environment"


def test_a_tool_whose_version_query_fails_is_no_tool(tmp_path):
    # `CUDACXX=/bin/false` showed as "nvcc ok Written by Jim Meyering", and a build took it.
    result = run("doctor", env={"CUDACXX": "/bin/false"})
    row = next(line for line in result.stdout.splitlines() if line.split()[0] == "nvcc")
    assert "Meyering" not in row and "$CUDACXX='/bin/false' does not run as nvcc" in row
    from opforge.build.toolchain import require_tool
    from opforge.errors import ToolMissing

    with pytest.raises(ToolMissing, match=r"\$CUDACXX=/bin/false does not run as nvcc"):
        require_tool("nvcc", "to build", "/bin/false")
    # Nor is a program whose --version succeeds but says nothing of CUDA.
    sleeper = run("doctor", env={"CUDACXX": "/bin/sleep"})
    row = next(line for line in sleeper.stdout.splitlines() if line.split()[0] == "nvcc")
    assert "$CUDACXX='/bin/sleep' does not run as nvcc" in row and "not that tool" in row


def test_a_test_command_whose_module_is_missing_is_one_clear_error(tmp_path):
    _one_target_project(tmp_path, "[python, -m, no_such_test_runner_xyz]")
    result = run("test", cwd=tmp_path)
    assert_user_error(
        result,
        "target lib: its tests need the python module no_such_test_runner_xyz, which is not "
        f"installed in {sys.executable}",
    )
    assert f"hint: {sys.executable} -m pip install no_such_test_runner_xyz" in result.stderr
    missing_program = (
        (tmp_path / "recipes" / "lib.yaml")
        .read_text()
        .replace("[python, -m, no_such_test_runner_xyz]", "[no-such-program-xyz]")
    )
    (tmp_path / "recipes" / "lib.yaml").write_text(missing_program)
    assert_user_error(
        run("test", cwd=tmp_path), "target lib: test command 'no-such-program-xyz' not found"
    )


def test_test_commands_run_with_the_interpreter_running_opforge(tmp_path):
    _probe_project(tmp_path, "import sys; open('which.txt', 'w').write(sys.executable)")
    result = run("test", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "which.txt").read_text() == sys.executable


def _cudnn_at(root, version: str, include: str = "include", lib: str | None = "lib") -> None:
    major, minor, patch = version.split(".")
    (root / include).mkdir(parents=True)
    (root / include / "cudnn.h").write_text('#include "cudnn_version.h"\n')
    (root / include / "cudnn_version.h").write_text(
        f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n"
    )
    if lib:
        (root / lib).mkdir(parents=True)
        (root / lib / f"libcudnn.so.{major}").write_bytes(b"")


def test_doctor_finds_the_cudnn_the_build_links(tmp_path, monkeypatch):
    """FindCUDNN.cmake's order (issue 11): CUDNN_ROOT, the pip wheel in site-packages, the CUDA
    toolkit, /usr; a root with a header but no library is passed over, as CMake does."""
    import sysconfig

    from opforge import doctor

    site_dir = tmp_path / "site"
    _cudnn_at(site_dir / "nvidia" / "cudnn", "9.1.0")
    monkeypatch.setattr(doctor, "site_packages", lambda: [str(site_dir)])
    monkeypatch.setattr(
        sysconfig, "get_paths", lambda: {"purelib": str(site_dir), "platlib": str(site_dir)}
    )
    _cudnn_at(tmp_path / "root", "8.9.7", lib=None)
    roots = doctor.cudnn_search_roots(tmp_path / "root")
    assert roots[:2] == [tmp_path / "root", site_dir / "nvidia" / "cudnn"]
    assert roots[-2:] == [doctor.Path("/usr/local/cuda"), doctor.Path("/usr")]
    found = doctor._cudnn(tmp_path / "root")
    assert found.ok and found.detail == f"9.1.0 at {site_dir / 'nvidia' / 'cudnn'}"

    _cudnn_at(tmp_path / "full", "9.5.2", "include/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
    assert doctor._cudnn(tmp_path / "full").detail == f"9.5.2 at {tmp_path / 'full'}"


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["build", "--jobs", "-3"], "argument --jobs: must be more than 0, got -3"),
        (["build", "--jobs", "0"], "argument --jobs: must be more than 0, got 0"),
        (["build", "--jobs", "two"], "argument --jobs: expected a whole number, got 'two'"),
        # int() takes other scripts' digits: '٣' is 3 to it.
        (["build", "--jobs", "\u0663"], "argument --jobs: expected a whole number, got '\u0663'"),
        (
            ["build", "--jobs", "99999999999999999999"],
            "argument --jobs: must be at most 4096, got 99999999999999999999",
        ),
        (["pins", "fetch", "--jobs", "0"], "argument --jobs: must be more than 0, got 0"),
        (["pins", "fetch", "--retries", "-1"], "argument --retries: must be 0 or more, got -1"),
        (["pins", "fetch", "--max-bytes", "0"], "argument --max-bytes: must be more than 0"),
    ],
)
def test_bad_numbers_are_refused_by_the_parser_in_one_line(tmp_path, argv, text):
    """Refused before anything runs (no build, no download), in opforge's one-line style."""
    result = run(*argv, cwd=tmp_path)
    assert result.returncode == 2
    assert_user_error(result, text)
    assert result.stderr.splitlines()[1] == f"  hint: see `opforge {' '.join(argv[:-2])} --help`"
    assert "usage:" not in result.stderr and not (tmp_path / "build").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["pins", "list", "--pins", ""],
        ["pins", "fetch", "x", "--dest", " "],
        ["pins", "fetch", "x", "--cache", ""],
        ["pins", "install", "x", "--target", ""],
        ["dist", "install", "--target", ""],
        ["test", "--junit-dir", ""],
        ["ci", "run-cell", "x", "--junit-dir", ""],
        ["images", "context", "--find-links", ""],
        ["images", "context", "--extra-ca", ""],
    ],
)
def test_an_empty_path_is_refused_not_read_as_the_default(tmp_path, argv):
    # `--target ''` installed into the running environment, `--pins ''` read the project's file.
    result = run(*argv, cwd=tmp_path)
    assert result.returncode == 2
    assert_user_error(result, f"argument {argv[-2]}: is empty; give a path")
    assert list(tmp_path.iterdir()) == []


def _opforge_into(output: object, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opforge", *argv],
        cwd=REPO,
        stdout=output,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("argv", [["recipes", "list"], ["doctor"], ["--help"], ["--version"]])
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(argv):
    with open("/dev/full", "w") as full:
        result = _opforge_into(full, *argv)
    assert result.returncode == 1
    assert_user_error(result, "cannot write the output: No space left on device")


def test_output_into_a_pipe_closed_by_its_reader_is_no_error():
    # As `opforge recipes list | head -0`: the reader is gone before anything is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as pipe:
        result = _opforge_into(pipe, "recipes", "list")
    assert result.returncode == 0 and result.stderr == ""


def test_a_missing_command_is_one_line_with_a_hint():
    result = run()
    assert result.returncode == 2
    assert_user_error(result, "the following arguments are required: COMMAND")
    assert "hint: see `opforge --help`" in result.stderr


def test_an_unknown_option_before_the_command_is_named():
    for argv in (["--bogus"], ["--bogus", "recipes", "list"], ["recipes", "--bogus"]):
        result = run(*argv)
        assert result.returncode == 2
        assert_user_error(result, "unrecognized arguments: --bogus")
    missing = run("recipes")
    assert missing.returncode == 2
    assert_user_error(missing, "the following arguments are required: ACTION")


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["recipes", "list", "--bogus"], "opforge recipes list"),
        (["pins", "fetch", "x", "--bogus"], "opforge pins fetch"),
        (["--bogus", "doctor"], "opforge"),
    ],
)
def test_an_unknown_option_is_hinted_at_the_help_of_the_command_it_follows(argv, command):
    # argparse reports leftovers from the top-level parser, whose help lists no such option.
    result = run(*argv)
    assert_user_error(result, "unrecognized arguments: --bogus")
    assert result.stderr.splitlines()[1] == f"  hint: see `{command} --help`"


@pytest.mark.parametrize("given", [["--project", "."], ["--project=."], ["--version"]])
def test_an_option_of_opforge_itself_after_the_command_says_where_it_goes(given):
    result = run("pins", "list", *given)
    assert_user_error(result, f"unrecognized arguments: {' '.join(given)}")
    option = given[0].split("=")[0]
    assert result.stderr.splitlines()[1] == (
        f"  hint: {option} is an option of opforge itself: give it before the command"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["recipes", "show", "a" * 100_000], "unknown target 'aaa"),
        (["ci", "list", "--" + "b" * 5_000], "unrecognized arguments: --bbb"),
    ],
)
def test_an_error_echoes_a_huge_argument_in_part(argv, said):
    result = run(*argv)
    assert_user_error(result, said)
    first = result.stderr.splitlines()[0]
    assert len(first) < 300 and "characters)" in first


def test_an_echoed_value_with_a_line_break_or_an_escape_stays_one_line(tmp_path):
    """A file where $OPFORGE_CACHE names a folder, its name holding a line break, a terminal
    escape and a right-to-left override: the error shows them escaped, on one line."""
    name = "cache\nfile\x1b[2J\u202e"
    (tmp_path / name).write_text("not a folder")
    env = {**os.environ, "OPFORGE_CACHE": str(tmp_path / name)}
    result = run("pins", "verify", env=env)
    assert_user_error(result, "cache\\nfile\\x1b[2J\\u202e")
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2, result.stderr


def test_an_unknown_argument_with_a_line_break_or_an_escape_stays_one_line():
    """argparse's own errors go through the same line writer as opforge's."""
    result = run("pins", "list", "x\ny\x1b[31mRED")
    assert_user_error(result, "unrecognized arguments: x\\ny\\x1b[31mRED")
    assert "\x1b" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2, result.stderr


def test_an_errors_lines_of_detail_follow_it_one_each_escaped(capsys):
    """A failed command's output lines go below the error line as they are, each on its own
    line; a line break or an escape sequence inside one is shown as its code."""
    report(
        BuildError(
            "step build failed (exit 1)",
            hint="the full log is build.log",
            details=["  last lines:", "    plain", "    red \x1b[31mtext\nsplit"],
        )
    )
    assert capsys.readouterr().err.splitlines() == [
        "opforge: error: step build failed (exit 1)",
        "  last lines:",
        "    plain",
        "    red \\x1b[31mtext\\nsplit",
        "  hint: the full log is build.log",
    ]


def test_an_output_that_cannot_hold_a_character_gets_its_code(tmp_path, pins_file):
    """stdout in ASCII (PYTHONIOENCODING=ascii) and a destination whose name is not: the line
    says it with the character's code, and the file is placed once."""
    dest = tmp_path / "dëst"
    result = run(
        "pins", "fetch", "--pins", str(pins_file), "--cache", str(tmp_path / "c"),
        "--dest", str(dest), env={"PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "d\\xebst" in result.stdout and "Traceback" not in result.stderr
    assert (dest / "data.tar.gz").is_file()


def test_fetch_dest_keeps_a_different_file_of_the_same_name(tmp_path, pins_file):
    """Placing the pin would have replaced it without a word; the same file again is fine."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "data.tar.gz").write_text("precious")
    args = ("pins", "fetch", "--pins", str(pins_file), "--cache", str(tmp_path / "c"))
    result = run(*args, "--dest", str(dest))
    assert_user_error(result, f"cannot place data.tar.gz in {dest}: a different file of that")
    assert f"hint: move or remove {dest / 'data.tar.gz'}" in result.stderr
    assert (dest / "data.tar.gz").read_text() == "precious"
    (dest / "data.tar.gz").unlink()
    assert run(*args, "--dest", str(dest)).returncode == 0
    assert run(*args, "--dest", str(dest)).returncode == 0, "placed again over itself"


def test_fetch_dest_names_a_folder_in_the_files_way(tmp_path, pins_file):
    (tmp_path / "dest" / "data.tar.gz").mkdir(parents=True)
    result = run(
        "pins", "fetch", "--pins", str(pins_file), "--cache", str(tmp_path / "c"),
        "--dest", str(tmp_path / "dest"),
    )  # fmt: skip
    assert_user_error(result, "cannot place data.tar.gz in ")
    assert "a folder of that name is in the way" in result.stderr
    assert f"hint: remove the folder {tmp_path / 'dest' / 'data.tar.gz'}" in result.stderr


def test_verify_names_the_files_it_was_given_in_its_hint(tmp_path, pins_file):
    """The command the hint gives works on the same pins file and cache."""
    cache = tmp_path / "my cache"
    result = run("pins", "verify", "--pins", str(pins_file), "--cache", str(cache))
    assert_user_error(result, "1 of 1 pin(s) missing or corrupt")
    assert f"run `opforge pins fetch data --pins={pins_file} '--cache={cache}'`" in result.stderr
    assert "--offline" not in run("pins", "verify", "--help").stdout


@pytest.mark.parametrize(
    "command", [["dist", "install", "--profile", "cpu"], ["pins", "install", "nvidia-cudnn-cu13"]]
)
def test_an_install_target_that_is_a_file_is_named_before_any_work(tmp_path, command):
    afile = tmp_path / "afile"
    afile.write_text("keep\n")
    result = run(*command, "--target", str(afile))
    assert_user_error(result, f"--target {afile} is not a directory")
    assert afile.read_text() == "keep\n"


def test_a_closed_stdout_drops_the_output_without_a_traceback(tmp_path, pins_file):
    """``opforge ... >&-``: the command runs, what it prints goes nowhere."""
    command = (
        f"{sys.executable} -m opforge pins fetch --pins {pins_file} --cache {tmp_path / 'c'} >&-"
    )
    result = subprocess.run(
        ["bash", "-c", command], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert any((tmp_path / "c").rglob("*")), "the download was made"


@pytest.mark.parametrize("where", ["--project", "recipes validate"])
def test_a_name_longer_than_the_system_takes_is_one_line(tmp_path, where):
    """A path with a name over 255 bytes (about 90 characters of a CJK script): the system's
    words and the path, one line, no traceback."""
    name = str(tmp_path / ("名" * 90))
    args = ["--project", name, "recipes", "list"] if where == "--project" else [
        "recipes", "validate", name]  # fmt: skip
    result = run(*args)
    assert_user_error(result, "File name too long: ")
    assert "a name in a path is at most 255 bytes" in result.stderr


@pytest.mark.parametrize("value", ["inf", "1e10"])
def test_a_deadline_past_what_its_timer_can_wait_is_refused(value):
    result = run("pins", "fetch", "--deadline", value)
    assert_user_error(result, f"argument --deadline: must be at most 1000000000.0, got {value}")


def test_outside_a_project_the_hint_names_the_project_flag(tmp_path):
    result = run("pins", "list", cwd=tmp_path)
    assert_user_error(result, f"no opforge project found at or above {tmp_path}")
    assert "give `opforge --project DIR` (or OPFORGE_PROJECT)" in result.stderr


def test_a_project_flag_inside_a_checkout_names_its_root(tmp_path):
    """--project at a folder that is not a checkout's root says so, as OPFORGE_PROJECT does,
    instead of blaming a pins file it never named."""
    flagged = run("--project", "kernels", "recipes", "list")
    assert flagged.returncode == 1
    assert_user_error(flagged, f"--project {REPO / 'kernels'} has no checksums.yaml")
    assert f"hint: point --project at the checkout's root, {REPO}, or leave it out" in (
        flagged.stderr
    )
    variable = run("recipes", "list", env={"OPFORGE_PROJECT": str(REPO / "kernels")})
    assert_user_error(variable, f"OPFORGE_PROJECT={REPO / 'kernels'} has no checksums.yaml")
    elsewhere = run("--project", str(tmp_path), "recipes", "list")
    assert_user_error(elsewhere, f"--project {tmp_path} has no checksums.yaml")
    assert "pins file" not in elsewhere.stderr


def test_relative_cache_and_build_dir_are_the_current_directorys(tmp_path, file_server):
    """Started in a folder below the project with relative OPFORGE_CACHE and OPFORGE_BUILD_DIR,
    a build downloads, configures, builds and logs in those folders under it, and CMake (run
    from the project root) gets the pinned file's real path."""
    body = os.urandom(5_000)
    url = file_server.add("/data.bin", body)
    root = tmp_path / "project"
    (root / "lib").mkdir(parents=True)
    (root / "recipes").mkdir()
    (root / "checksums.yaml").write_text(
        f"pins:\n  data:\n    url: {url}\n    sha256: {sha256(body)}\n"
    )
    (root / "lib" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(lib NONE)\n"
        'if(NOT EXISTS "${OPFORGE_PIN_DATA}")\n'
        '  message(FATAL_ERROR "no pinned file at ${OPFORGE_PIN_DATA}")\nendif()\n'
        'install(FILES "${OPFORGE_PIN_DATA}" DESTINATION share RENAME data.bin)\n'
    )
    (root / "recipes" / "lib.yaml").write_text(
        "name: lib\nschema: 1\nsources: [lib/*]\npins: [data]\ncmake: {source_dir: lib}\n"
        "profiles: {cpu: {}}\noutputs: [share/data.bin]\n"
    )
    here = root / "lib"
    env = {"OPFORGE_CACHE": "relcache", "OPFORGE_BUILD_DIR": "relbuild"}
    result = run("build", "--quiet", cwd=here, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "dist" / "cpu" / "share" / "data.bin").read_bytes() == body
    tree = here / "relbuild" / "cpu" / "lib"
    assert (tree / "CMakeCache.txt").is_file() and (tree / "opforge-build.log").is_file()
    assert (here / "relbuild" / ".opforge.lock").is_file()
    assert (here / "relcache" / "sha256").is_dir()
    assert not (root / "relbuild").exists() and not (root / "relcache").exists()
    # A blank OPFORGE_CACHE is unset (the user cache dir), not a folder named " ".
    blank_env = {"OPFORGE_CACHE": " ", "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    blank = run("pins", "fetch", cwd=here, env=blank_env)
    assert blank.returncode == 0, blank.stderr
    assert (tmp_path / "xdg" / "opforge" / "sha256").is_dir() and not (here / " ").exists()


def test_a_missing_project_directory_is_named(tmp_path):
    result = run("--project", str(tmp_path / "nonexistent"), "pins", "list")
    assert_user_error(result, f"project directory {tmp_path / 'nonexistent'} (--project) does not")
    assert "hint: point --project at the root of an opforge checkout" in result.stderr
    assert "--pins" not in result.stderr


def test_a_cache_root_that_is_a_file_is_named(tmp_path, pins_file):
    not_a_dir = tmp_path / "cache-file"
    not_a_dir.write_text("")
    for cache in (not_a_dir, not_a_dir / "below"):
        for action in ("fetch", "verify"):
            result = run(
                "pins", action, "--pins", str(pins_file), env={"OPFORGE_CACHE": str(cache)}
            )
            assert_user_error(result, f"cache root {cache} is not a directory")
            assert "hint: set OPFORGE_CACHE (or pass --cache) to a directory" in result.stderr
            assert "remove" not in result.stderr


def _docker_hint(*argv: str, tmp_path: Path, cwd: Path = REPO) -> str:
    env = {"DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"}
    result = run(*argv, cwd=cwd, env=env)
    assert_user_error(result, "no Docker engine answers")
    return result.stderr.splitlines()[-1]


def test_no_engine_hints_name_only_options_the_command_has(tmp_path):
    for argv in (["images", "build"], ["images", "lock"]):
        assert (
            _docker_hint(*argv, tmp_path=tmp_path) == "  hint: start dockerd (or set DOCKER_HOST)"
        )
    cell = run("ci", "list").stdout.split()[0]
    junit = str(tmp_path / "reports")
    hint = _docker_hint("ci", "run-cell", cell, "--junit-dir", junit, tmp_path=tmp_path)
    assert "--dry-run" in hint and "--runner" not in hint
    project = tmp_path / "project"
    project.mkdir()
    _probe_project(project)
    for command in ("build", "test"):
        argv = (command, "--runner", "docker", "--cache", str(tmp_path / "cache"))
        assert "--runner host" in _docker_hint(*argv, tmp_path=tmp_path, cwd=project)


_DIST_PROBE = "import os; open('dist.txt', 'w').write(os.environ.get('OPFORGE_TEST_DIST', '-'))"


def _one_target_project(root: Path, command: str) -> None:
    """A project of one target, lib (cpu and gpu profiles), with test command ``command`` (a
    YAML list)."""
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "recipes").mkdir()
    (root / "lib").mkdir()
    (root / "lib" / "CMakeLists.txt").write_text("project(lib NONE)\n")
    (root / "recipes" / "lib.yaml").write_text(
        "name: lib\nschema: 1\nsources: [lib/*]\ncmake: {source_dir: lib}\n"
        f"profiles: {{cpu: {{}}, gpu: {{}}}}\noutputs: [lib/x]\ntest: {{command: {command}}}\n"
    )


def _probe_project(root: Path, probe: str = _DIST_PROBE) -> None:
    """The one-target project whose test command is ``python -c probe``."""
    _one_target_project(root, f'[python, -c, "{probe}"]')


def test_host_tests_honour_the_profile(tmp_path):
    """`test --profile P` on the host tests P's build in dist/ (OPFORGE_TEST_DIST=P, as in the
    runtime image); without --profile the tests build their own."""
    _probe_project(tmp_path)
    plain = run("test", cwd=tmp_path, env={"OPFORGE_TEST_DIST": ""})
    assert plain.returncode == 0, plain.stderr
    assert (tmp_path / "dist.txt").read_text() in ("", "-")
    refused = run("test", "--profile", "gpu", cwd=tmp_path)
    assert_user_error(refused, "--profile gpu tests the gpu build in dist/")
    assert "hint: run `opforge build --profile gpu` first" in refused.stderr
    (tmp_path / "dist").mkdir()
    record = {"recipe": "lib", "profile": "gpu", "inputs_sha256": "0", "inputs": {}, "prefix": ""}
    (tmp_path / "dist" / "build-record.json").write_text(
        json.dumps({"schema": 1, "targets": {"lib": {"gpu": record}}})
    )
    result = run("test", "--profile", "gpu", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "dist.txt").read_text() == "gpu"


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (
            ["test", "--runner", "host", "--flavour", "ngc", "--cuda", "99"],
            "--flavour --cuda: image flags have no effect with --runner host (opforge test",
        ),
        (
            ["build", "--framework", "none"],
            "--framework: image flags have no effect with --runner host (opforge build",
        ),
    ],
)
def test_flags_the_host_runner_would_ignore_are_refused(tmp_path, argv, text):
    """Silently ignored, they would seem honoured: refused as usage errors before anything runs
    (the test command here would leave dist.txt behind)."""
    _probe_project(tmp_path)
    result = run(*argv, cwd=tmp_path)
    assert result.returncode == 2
    assert_user_error(result, text)
    assert "--runner docker" in result.stderr.splitlines()[1]
    assert not (tmp_path / "dist.txt").exists() and not (tmp_path / "reports").exists()
    assert not (tmp_path / "build").exists()


def test_every_command_s_own_help_says_what_it_does():
    """``opforge ci list --help`` gave usage and options only; the parent's one line now opens
    each command's own help where it has no description of its own."""
    import argparse

    from opforge.cli import build_parser

    def commands(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield (*path, name), sub
                    yield from commands(sub, (*path, name))

    found = list(commands(build_parser()))
    assert len(found) > 20
    for path, parser in found:
        assert parser.description, " ".join(path)
        shown = " ".join(parser.format_help().split())
        assert " ".join(parser.description.split()) in shown, " ".join(path)


def test_pins_list_of_a_file_with_no_pins_says_so(tmp_path):
    pins = write_pins(tmp_path / "pins.yaml", "pins: {}\n")
    result = run("pins", "list", "--pins", str(pins), "--cache", str(tmp_path / "c"))
    assert result.returncode == 0 and result.stdout == f"no pins in {pins}\n", result.stderr


def test_a_loop_of_links_given_as_a_folder_is_said_to_be_one(tmp_path, pins_file):
    """--dest, --cache and OPFORGE_BUILD_DIR given as a loop of links were "not a directory",
    a permissions problem or "exists and is not a directory"."""
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    fetch = ("pins", "fetch", "--pins", str(pins_file))
    dest = run(*fetch, "--cache", str(tmp_path / "c"), "--dest", str(loop))
    assert_user_error(dest, f"--dest {loop}: {loop} is a loop of symbolic links")
    cache = run(*fetch, "--cache", str(loop))
    assert_user_error(cache, "Too many levels of symbolic links")
    assert "hint: a link on the way to the cache loops" in cache.stderr
    build = run("images", "context", env={"OPFORGE_BUILD_DIR": str(loop)})
    assert_user_error(build, f"the build directory {loop} is a loop of symbolic links")
