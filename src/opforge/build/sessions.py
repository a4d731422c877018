"""A build step's processes as one session (the step's process leads it): who is still in it,
and stopping all of them."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def session_members(session: int) -> list[int]:
    """Live (not zombie) processes of ``session``, from /proc."""
    members: list[int] = []
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return members
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def stop_session(session: int, grace_s: float) -> None:
    """Stop every process of ``session``, whose id is its leader's pid.

    SIGTERM goes to the leader's process group; ninja puts each job in a group of its own and
    passes the signal on to them, so the session's members get ``grace_s`` to finish, and
    whatever is left of the session (those groups included) then gets SIGKILL.
    """
    if session <= 1 or not session_members(session):
        # killpg(1) would signal every process there is, killpg(0) the caller's own group; and
        # a session with no members left may have had its id reused.
        return
    signal_group(session, signal.SIGTERM)
    give_up = time.monotonic() + grace_s
    while session_members(session) and time.monotonic() < give_up:
        time.sleep(0.05)
    signal_group(session, signal.SIGKILL)
    for pid in session_members(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def signal_group(group: int, sig: signal.Signals) -> None:
    """``sig`` to process group ``group``, if it still exists."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, sig)
