"""Write the code generated from the op table: ``python -m opforge.kernels TARGET TABLE OUTDIR``.

CMake runs it at build time (kernels/, adapters/); ``sources`` prints the generator's own files,
which the build lists as dependencies so that a changed generator regenerates.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from opforge.atomic import require_inside, write_text
from opforge.errors import OpforgeError
from opforge.kernels import gen_c, gen_mindspore, gen_torch, optable, stable_abi
from opforge.report import report

_HERE = Path(__file__).resolve().parent

# target -> {relative path: generator}
_TARGETS: dict[str, dict[str, Callable[[optable.OpTable], str]]] = {
    "c": {
        "include/opforge/ops.h": gen_c.header,
        "ops_args.hpp": gen_c.args_header,
        "ops_api.cpp": gen_c.api_source,
    },
    "torch": {
        "ops.cpp": gen_torch.cpp_source,
        "_ops.py": gen_torch.python_source,
        "_shapes.py": lambda table: _copy("shapes.py"),
    },
    "mindspore": {
        "aot_ops.inc": gen_mindspore.aot_source,
        "_ops.py": gen_mindspore.python_source,
        "_signatures.py": gen_mindspore.signatures_source,
        "_shapes.py": lambda table: _copy("shapes.py"),
        "_abi.py": lambda table: _copy("abi.py"),
    },
}


def _copy(name: str) -> str:
    # Framework-free modules each adapter ships a copy of (one source, several wheels).
    return (_HERE / name).read_text(encoding="utf-8")


def generator_sources() -> list[Path]:
    """The Python files the generated code depends on."""
    return sorted(_HERE.glob("*.py"))


def write(target: str, table_path: Path, out_dir: Path) -> list[Path]:
    """Generate ``target``'s files under ``out_dir``; unchanged files are left untouched, and
    none is written through a link out of ``out_dir``."""
    table = optable.load(table_path)
    written = []
    for relative, generate in _TARGETS[target].items():
        path = out_dir / relative
        text = generate(table)
        # CMake's build tree, where out_dir lies, may itself be anywhere (a build directory of
        # the user's choosing, a container's): out_dir is the one bound known here. Checked
        # before reading too: an outside file a link stands in for must not pass as up to date.
        require_inside(out_dir, path)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            write_text(path, text, root=out_dir)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: generate a target, or list the generator's sources."""
    parser = argparse.ArgumentParser(prog="python -m opforge.kernels", description=__doc__)
    parser.add_argument(
        "target", choices=[*sorted(_TARGETS), "sources", "outputs", "check-stable-abi"]
    )
    parser.add_argument("table", type=Path, nargs="?")
    parser.add_argument("out_dir", type=Path, nargs="?")
    args = parser.parse_args(argv)
    if args.target == "sources":
        print(";".join(str(p) for p in generator_sources()))
        return 0
    if args.target == "check-stable-abi":
        # `check-stable-abi EXTENSION`: fail if it uses anything outside LibTorch's stable ABI.
        try:
            stable_abi.check(args.table)
        except OpforgeError as exc:
            report(exc)
            return 1
        print(f"{args.table.name}: only LibTorch stable-ABI and runtime symbols")
        return 0
    if args.target == "outputs":
        # `outputs TARGET`: the files a target generates, relative to its output directory.
        print(";".join(_TARGETS[str(args.table)]))
        return 0
    if args.table is None or args.out_dir is None:
        parser.error("give the op table and the output directory")
    try:
        write(args.target, args.table, args.out_dir)
    except OpforgeError as exc:
        report(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
