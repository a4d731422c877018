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
        "doctor",
        help="what this machine offers: docker, nvcc, cuDNN, GPU, ...",
        description="Check what this machine offers a build and its tests: Python, the Docker "
        "engine, cmake, ninja, the C++ compiler and nvcc (and which one a build will use, and "
        "why), cuDNN, a GPU, torch, MindSpore, numpy, the proxy settings and the CA bundle; one "
        "row each, saying what is missing or wrong.",
    ).set_defaults(func=cmd_doctor)
