"""How opforge reads a tool's ``--version`` (the compiler, nvcc, cmake): a wrapper that prints
bytes that are not UTF-8, escape sequences or endless output, or hangs, is no crash, no terminal
trick and no process left behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from opforge.build import toolchain
from tests.conftest import REPO, run_opforge


@pytest.fixture(autouse=True)
def fresh_tools():
    toolchain.find_tool.cache_clear()
    yield
    toolchain.find_tool.cache_clear()


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "tool"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_version_that_is_not_utf8_is_read_with_replacements(tmp_path):
    tool = script(tmp_path, r"printf 'c++ \377\376 9.1\n'" + "\n")
    found = toolchain.find_tool("c++", str(tool))
    assert found is not None and found.version == "c++ \ufffd\ufffd 9.1"


def test_escape_sequences_in_a_version_do_not_reach_the_terminal(tmp_path):
    tool = script(tmp_path, r"printf '\033[2J\033]0;pwned\007evil 1.0\n'" + "\n")
    doctor = run_opforge("--project", str(REPO), "doctor", env={"CXX": str(tool)})
    row = next(line for line in doctor.stdout.splitlines() if line.startswith("c++"))
    assert "\033" not in row and "\007" not in row and "?[2J?]0;pwned?evil 1.0" in row


def test_endless_output_is_no_tool_and_no_memory_blowup(tmp_path):
    tool = script(tmp_path, "cat /dev/zero\n")
    assert toolchain.find_tool("c++", str(tool)) is None
    doctor = run_opforge("--project", str(REPO), "doctor", env={"CXX": str(tool)})
    assert "Traceback" not in doctor.stderr
    row = next(line for line in doctor.stdout.splitlines() if line.startswith("c++"))
    assert f"$CXX='{tool}' does not run as c++" in row and "point CXX at the c++" in row


@pytest.mark.slow
def test_a_hanging_wrapper_is_ended_with_its_children(tmp_path):
    marker = tmp_path / "child-alive"
    tool = script(
        tmp_path, f"(sleep 1000; touch {marker}) &\necho $! > {tmp_path}/pid\nsleep 1000\n"
    )
    started = time.monotonic()
    assert toolchain.find_tool("c++", str(tool)) is None
    assert time.monotonic() - started < 60
    child = int((tmp_path / "pid").read_text())
    time.sleep(0.2)
    status = Path(f"/proc/{child}/status")
    # Gone, or a zombie that init has yet to reap: not running on.
    assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_doctor_reads_only_the_start_of_a_huge_cudnn_header(tmp_path):
    # A 20 GB sparse cudnn_version.h was read whole: doctor grew to 23 GB and was OOM-killed.
    (tmp_path / "include").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudnn.so.9").write_bytes(b"")
    (tmp_path / "include" / "cudnn.h").write_text("")
    version = tmp_path / "include" / "cudnn_version.h"
    version.write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 13\n#define CUDNN_PATCHLEVEL 0\n"
    )
    with version.open("r+b") as grown:
        grown.truncate(20 << 30)
    doctor = run_opforge(
        "--project", str(REPO), "doctor", env={"CUDNN_ROOT": str(tmp_path)}, timeout=120
    )
    row = next(line for line in doctor.stdout.splitlines() if line.startswith("cuDNN"))
    assert f"9.13.0 at {tmp_path}" in row
