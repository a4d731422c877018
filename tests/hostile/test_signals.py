"""A killed ``opforge build`` takes its build tools with it: cmake, ninja and what they started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.conftest import dedent

pytestmark = pytest.mark.slow


def _hanging_project(root: Path, *, deaf: bool = False) -> Path:
    """A project whose one target's build step starts a long sleep and records its pid
    (``deaf``: the step and its sleep ignore SIGTERM, so only SIGKILL ends them)."""
    (root / "src").mkdir(parents=True)
    (root / "recipes").mkdir()
    (root / "checksums.yaml").write_text("pins: {}\n")
    trap = "trap '' TERM\n" if deaf else ""
    (root / "src" / "hang.sh").write_text(f"{trap}sleep 300 &\necho $! > {root}/sleep.pid\nwait\n")
    (root / "src" / "CMakeLists.txt").write_text(
        dedent(
            """
            cmake_minimum_required(VERSION 3.20)
            project(hangs NONE)
            add_custom_target(hang ALL COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/hang.sh)
            """
        )
    )
    (root / "recipes" / "hang.yaml").write_text(
        dedent(
            """
            name: hang
            schema: 1
            sources: [src/CMakeLists.txt]
            cmake: {source_dir: src}
            profiles: {cpu: {}}
            outputs: [never]
            """
        )
    )
    return root


def _ancestors(pid: int, stop: int) -> list[int]:
    """``pid`` and its parents up to, not including, ``stop``."""
    chain = []
    while pid not in (stop, 0, 1):
        chain.append(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _build_in_its_step(project: Path) -> tuple[subprocess.Popen, list[int]]:
    """``opforge build`` of ``project`` started as a shell job (its own group, so the test is not
    signalled), once its step runs: the process and the tools between opforge and the sleep."""
    build = subprocess.Popen(
        [sys.executable, "-m", "opforge", "--project", str(project), "build", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pid_file = project / "sleep.pid"
    give_up = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert build.poll() is None, build.communicate()
        assert time.monotonic() < give_up, "the build step never started"
        time.sleep(0.1)
    tools = _ancestors(int(pid_file.read_text()), stop=build.pid)
    assert len(tools) >= 3, "sleep, the shells and ninja/cmake between it and opforge"
    return build, tools


def _assert_all_gone(tools: list[int], within_s: float) -> None:
    give_up = time.monotonic() + within_s
    while any(_alive(pid) for pid in tools) and time.monotonic() < give_up:
        time.sleep(0.1)
    try:
        assert [pid for pid in tools if _alive(pid)] == [], "build tools outlived opforge"
    finally:
        for pid in tools:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT],
    ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"],
)
def test_a_signalled_build_stops_its_tools(tmp_path, sig):
    # SIGHUP (the terminal closed) and SIGQUIT left cmake, ninja and the compilers running.
    build, tools = _build_in_its_step(_hanging_project(tmp_path / "project"))

    build.send_signal(sig)
    _, stderr = build.communicate(timeout=30)

    _assert_all_gone(tools, within_s=10)
    assert build.returncode == 128 + sig and "opforge: interrupted" in stderr
    assert "Traceback" not in stderr


def test_a_build_killed_outright_takes_its_tools_too(tmp_path):
    # kill -9 (or the OOM killer) gives opforge no chance to stop them: its watcher does.
    build, tools = _build_in_its_step(_hanging_project(tmp_path / "project"))

    build.kill()
    build.communicate(timeout=30)
    assert build.returncode == -signal.SIGKILL

    _assert_all_gone(tools, within_s=20)


def test_a_second_interrupt_does_not_cut_the_stop_short(tmp_path):
    # A second Ctrl-C during the grace period ended the stop before its SIGKILL, and told the
    # watcher all was well: a step deaf to SIGTERM kept running.
    build, tools = _build_in_its_step(_hanging_project(tmp_path / "project", deaf=True))

    build.send_signal(signal.SIGINT)
    time.sleep(1)
    build.send_signal(signal.SIGINT)
    _, stderr = build.communicate(timeout=30)

    _assert_all_gone(tools, within_s=15)
    assert "opforge: interrupted" in stderr and "Traceback" not in stderr
