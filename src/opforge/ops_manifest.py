"""The op manifest (``kernels/ops.yaml``) and the adapter code generated from it.

Run as ``python -m opforge.ops_manifest torch-registrations OPS_YAML OUT [--cuda]`` to write the
PyTorch adapter's registrations, or ``... mindspore-entries OPS_YAML OUT`` for the MindSpore
adapter's AOT entry points (CMake does both at build time).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError, OpforgeError
from opforge.yamlfile import parse_yaml

_DTYPES = {"float32", "float16", "bfloat16"}
_KEYS = {"schema", "dtypes", "backward", "gradient"}


@dataclass(frozen=True)
class Op:
    """One op: its schema, accepted dtypes and the op computing its gradient."""

    name: str
    schema: str
    dtypes: tuple[str, ...]
    backward: str | None = None


def load_manifest(path: Path) -> dict[str, Op]:
    """Read and validate the op manifest; errors name the file and the key."""
    try:
        data = parse_yaml(path, path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read op manifest {path}: {exc.strerror}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ops"), dict):
        raise ConfigError(f"{path}: expected a top-level `ops:` mapping")
    ops: dict[str, Op] = {}
    for name, raw in data["ops"].items():
        where = f"{path}: ops.{name}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown key", hint=f"allowed: {', '.join(sorted(_KEYS))}"
            )
        schema = raw.get("schema")
        if not isinstance(schema, str) or not re.match(
            rf"^{re.escape(str(name))}\(.*\) -> .+$", schema
        ):
            raise ConfigError(f"{where}.schema: expected `{name}(ARGS) -> RESULT`, got {schema!r}")
        dtypes = raw.get("dtypes", [])
        if not isinstance(dtypes, list) or not dtypes or not set(dtypes) <= _DTYPES:
            raise ConfigError(
                f"{where}.dtypes: expected a list drawn from {', '.join(sorted(_DTYPES))}"
            )
        ops[str(name)] = Op(str(name), schema, tuple(dtypes), raw.get("backward"))
    for op in ops.values():
        if op.backward is not None and op.backward not in ops:
            raise ConfigError(f"{path}: ops.{op.name}.backward: unknown op {op.backward!r}")
    return ops


def torch_registrations(ops: dict[str, Op], cuda: bool) -> str:
    """C++ registering every op with TORCH_LIBRARY and binding it to opforge_torch::<name>."""
    lines = [
        "// Generated from kernels/ops.yaml by `python -m opforge.ops_manifest`; do not edit.",
        "TORCH_LIBRARY(opforge, m) {",
        *(f'  m.def("{op.schema}");' for op in ops.values()),
        "}",
    ]
    for key in ("CPU", "CUDA") if cuda else ("CPU",):
        lines.append(f"TORCH_LIBRARY_IMPL(opforge, {key}, m) {{")
        lines += [
            f'  m.impl("{op.name}", TORCH_FN(opforge_torch::{op.name}));' for op in ops.values()
        ]
        lines.append("}")
    return "\n".join(lines) + "\n"


def mindspore_entries(ops: dict[str, Op]) -> str:
    """C++ defining one MindSpore AOT entry point per op, bound to opforge_ms::<name>."""
    lines = ["// Generated from kernels/ops.yaml by `python -m opforge.ops_manifest`; do not edit."]
    lines += [f"OPFORGE_MS_ENTRY({op.name})" for op in ops.values()]
    return "\n".join(lines) + "\n"


_GENERATORS = {
    "torch-registrations": lambda ops, args: torch_registrations(ops, args.cuda),
    "mindspore-entries": lambda ops, args: mindspore_entries(ops),
}


def main(argv: list[str] | None = None) -> int:
    """Write generated adapter code."""
    parser = argparse.ArgumentParser(prog="python -m opforge.ops_manifest", description=__doc__)
    parser.add_argument("what", choices=sorted(_GENERATORS))
    parser.add_argument("manifest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cuda", action="store_true", help="also register the CUDA kernels")
    args = parser.parse_args(argv)
    try:
        text = _GENERATORS[args.what](load_manifest(args.manifest), args)
    except OpforgeError as exc:
        print(f"opforge: error: {exc.message}", file=sys.stderr)
        return 1
    if not args.out.exists() or args.out.read_text() != text:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
