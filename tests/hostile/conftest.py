"""The hostile-input suite: real faults (loopback servers that trickle, over-send or stall, a full
or read-only filesystem, kill signals) and hostile files (alias bombs, escaping paths, poisoned
cache entries). Every case ends in one readable line and loses nothing, or recovers."""

from __future__ import annotations

import os
import resource
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_opforge, sha256

# Generous for the CLI, small enough that a regression into an alias bomb fails instead of
# taking the machine down.
_MEMORY_LIMIT = 3 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))


def opforge(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``opforge ARGS`` as a subprocess, bounded in memory and time."""
    return run_opforge(
        *args,
        cwd=cwd,
        env={"OPFORGE_NO_PROGRESS": "1", **(env or {})},
        timeout=timeout,
        preexec_fn=_limit_memory,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    """Non-zero exit, no traceback, ``opforge: error: ...`` naming every fragment, at most a hint
    after it; returns the error line."""
    assert result.returncode not in (0, None), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(("opforge:", "  "))]
    errors = [line for line in lines if line.startswith("opforge: error: ")]
    assert len(errors) == 1, result.stderr
    tail = result.stderr[result.stderr.index(errors[0]) :].strip().splitlines()
    assert all(line.startswith("  hint: ") for line in tail[1:]), result.stderr
    for fragment in fragments:
        assert fragment in errors[0], result.stderr
    return errors[0]


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: file contents, link targets, 'dir' for directories."""
    found: dict[str, bytes | str] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            found[key] = "dir"
        elif path.is_file():
            found[key] = path.read_bytes()
        else:
            found[key] = "special"
    return found


def pins_yaml(path: Path, **pins: dict) -> Path:
    """Write a pins file: ``name={"url": ..., "sha256": ..., ...}`` per pin."""
    lines = ["pins:"]
    for name, fields in pins.items():
        lines.append(f"  {name}:")
        lines += [f"    {key}: {value}" for key, value in fields.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def pin_fields(url: str, body: bytes, *, size: bool = True) -> dict:
    """The fields of a pin for ``body`` served at ``url``."""
    fields = {"url": url, "sha256": sha256(body)}
    if size:
        fields["size"] = len(body)
    return fields


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    """An empty directory to mount on, unmounted (lazily, if busy) afterwards."""
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def mount_tmpfs(point: Path, size: str) -> None:
    """A tmpfs of ``size`` on ``point``, or a skip saying why it cannot be had here."""
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {result.stderr.strip()}")


def remount_read_only(point: Path) -> None:
    """Make the tmpfs at ``point`` read-only (even root cannot write it then)."""
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)


def dedent(text: str) -> str:
    """``textwrap.dedent`` with the leading newline dropped."""
    return textwrap.dedent(text).lstrip("\n")
