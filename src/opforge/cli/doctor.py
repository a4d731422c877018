"""``opforge doctor``: what this machine offers, as one table."""

from __future__ import annotations

import argparse

from opforge.doctor import render_table, run_checks
from opforge.settings import Settings


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Print what this machine offers."""
    print(render_table(run_checks(settings)))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``doctor``."""
    sub.add_parser(
        "doctor", help="what this machine offers: docker, nvcc, cuDNN, GPU, ..."
    ).set_defaults(func=cmd_doctor)
