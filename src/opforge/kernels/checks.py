"""An op's argument checks, in the order the kernel library makes them.

One tensor at a time (dtypes, rank), then the scalars (dim, bounds, choices, shapes), then the
relations between tensors, then the op-level rules. Two generators render the same list: the
kernel library's C++ (``gen_c``: ``Call`` methods) and torch's fake kernels (``gen_torch``:
``_fake_checks``), so that a fake tensor is refused exactly where, and in the words, a real one
is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opforge.kernels.optable import Arg, Op, OpTable, check_name

# Scalar check keys of the table, in order, and the check each makes.
_SCALAR_KINDS = (
    ("dim", "dim"),
    ("min", "at_least"),
    ("finite", "finite"),
    ("values", "choice"),
    ("suffix", "suffix"),
)
_OP_LEVEL_KINDS = ("together", "required_unless", "per_channel_count")


@dataclass(frozen=True)
class Check:
    """One check: its ``kind`` (the library's ``Call`` method it becomes), the argument it
    checks (None for an op-level rule), what the table says (``spec``) and its ``name`` in a
    framework function's ``raises`` (``optable.check_names``: ``eps.min``, ``together``):

    - dtypes: the allowed dtype names; rank: (lo, hi)
    - dim, suffix: the tensor named; at_least: the bound; finite: True; choice: the values
    - like, broadcastable: the tensor named
    - channels: (the tensor named, the param_dtype tensor or None)
    - batch_shaped: (the tensor whose leading dims it has, the int[] of the normalised dims)
    - shaped: (the int[] giving the shape, the param_dtype tensor or None)
    - together, required_unless, per_channel_count: the op-level rule's value
    """

    kind: str
    arg: Arg | None
    spec: Any
    name: str


def argument_checks(table: OpTable, op: Op) -> list[Check]:
    """Every argument check of ``op``, in the kernel library's order."""
    checks: list[Check] = []

    def add(kind: str, arg: Arg, key: str, spec: Any) -> None:
        checks.append(Check(kind, arg, spec, check_name(arg.name, key)))

    for arg in op.tensors:
        if "dtypes" in arg.checks:
            add("dtypes", arg, "dtypes", tuple(table.dtype_sets[arg.checks["dtypes"]]))
        if "rank" in arg.checks:
            add("rank", arg, "rank", tuple(arg.checks["rank"]))
    for arg in op.scalars:
        for key, kind in _SCALAR_KINDS:
            if key in arg.checks:
                add(kind, arg, key, arg.checks[key])
    for arg in op.tensors:
        given = arg.checks
        like = given.get("param_dtype")
        for key, kind in (("like", "like"), ("broadcast", "broadcastable")):
            if key in given:
                add(kind, arg, key, given[key])
        if "channels" in given:
            add("channels", arg, "channels", (given["channels"], like))
        if "batch" in given:
            add("batch_shaped", arg, "batch", (given["batch"]["of"], given["batch"]["normalized"]))
        if "shape" in given:
            add("shaped", arg, "shape", (given["shape"], like))
    for rule in op.checks:
        ((kind, spec),) = rule.items()
        if kind not in _OP_LEVEL_KINDS:
            raise ValueError(f"{op.name}: no check for the op-level rule {kind!r}")
        checks.append(Check(kind, None, spec, kind))
    return checks
