"""The conformance data of every op: one module per op of kernels/ops.yaml.

Each module has ``CASES`` (a list of :class:`tests.conformance.case.Case`), ``inputs(case, rng)``
(its tensor arguments as float64 arrays representable in their dtypes; ``None`` for an absent
optional one) and ``reference(**arguments)``, the op in float64 (its outputs, and the updated
values of the tensors it writes in place, by name). The runners hold nothing per op.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

_HERE = Path(__file__).resolve().parent


def module(op: str) -> ModuleType:
    """The conformance module of ``op``."""
    return importlib.import_module(f"tests.conformance.ops.{op}")


def names() -> list[str]:
    """The ops that have conformance data."""
    return sorted(p.stem for p in _HERE.glob("*.py") if p.stem != "__init__")
