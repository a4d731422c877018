"""Source rules for the kernel library that guard against known compiler faults.

nvcc 13.0 (V13.0.88) drops code silently: in a template instantiated with the condition false,
an `if constexpr (...)` whose statement is an unbraced loop with a `#pragma unroll` inside,
followed by a `#pragma unroll` loop, loses that following loop too (found on 2026-11-27 when a
softmax kernel skipped its statistics; braces around the loop, or a plain `if`, compile
correctly). The kernels therefore brace every `if constexpr` whose statement is a loop."""

from __future__ import annotations

import re

from tests.conftest import REPO

SOURCES = [
    p
    for root in (REPO / "kernels" / "src", REPO / "adapters")
    for p in sorted(root.rglob("*"))
    if p.suffix in (".cu", ".cuh", ".cpp", ".hpp", ".h")
]
_IF_CONSTEXPR = re.compile(r"\bif\s+constexpr\s*\(")


def _statement_after(text: str, start: int) -> str:
    """The text after the parenthesised condition that opens at ``start`` (its '(')."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[i + 1 :]
    return ""


def unbraced_constexpr_loops(text: str) -> list[int]:
    """Line numbers of each `if constexpr (...)` whose statement is a loop without braces."""
    found = []
    for m in _IF_CONSTEXPR.finditer(text):
        after = _statement_after(text, m.end() - 1).lstrip()
        if re.match(r"(for|while|do)\b", after):
            found.append(text.count("\n", 0, m.start()) + 1)
    return found


def test_the_rule_finds_the_miscompiled_form():
    miscompiled = """
  if constexpr (kSpill) for (int64_t k = held; k < mine; ++k) {
#pragma unroll
    for (int u = 0; u < 4; ++u) s += v[u];
  }
"""
    next_line = "  if constexpr (f(a, (b)))\n    while (x) --x;\n"
    braced = "  if constexpr (kSpill) {\n    for (int k = 0; k < n; ++k) s += k;\n  }\n"
    call = "  if constexpr (kBackward)\n    copy_async<16>(dst, src);\n"
    assert unbraced_constexpr_loops(miscompiled) == [2]
    assert unbraced_constexpr_loops(next_line) == [1]
    assert unbraced_constexpr_loops(braced) == []
    assert unbraced_constexpr_loops(call) == []


def test_no_kernel_source_has_an_unbraced_constexpr_loop():
    assert SOURCES, "no kernel sources found"
    offenders = [
        f"{p.relative_to(REPO)}:{line}"
        for p in SOURCES
        for line in unbraced_constexpr_loops(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        "brace the loop of each `if constexpr` (nvcc 13.0 drops the code after such a loop): "
        + ", ".join(offenders)
    )
