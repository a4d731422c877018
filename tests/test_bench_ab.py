"""bench/ab_libraries.py's argument parsing and summary (its timing needs a GPU)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("torch", reason="bench/ab_libraries.py imports torch (not installed)")
sys.path.insert(0, str(REPO / "bench"))
import ab_libraries


def _run(library: str, ms: float, err: float = 1e-7) -> dict:
    row = {
        "op": "layer_norm_backward",
        "size": "4096x8192",
        "dtype": "float32",
        "floor_ms": 0.07,
        "ours_ms": ms,
        "max_rel_err": {"dx": err},
    }
    return {"library": library, "rows": [row]}


def test_library_arguments_are_name_and_path():
    assert ab_libraries.named_library("base=/x/lib.so") == ("base", Path("/x/lib.so"))
    for bad in ("lib.so", "=lib.so", "base="):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=PATH"):
            ab_libraries.named_library(bad)


def test_summary_gives_median_and_spread_per_library():
    runs = [_run("base", t) for t in (0.10, 0.08, 0.09)] + [_run("new", t) for t in (0.07, 0.07)]
    summary = {e["library"]: e for e in ab_libraries.summarise(runs)}
    assert summary["base"]["median_ms"] == pytest.approx(0.09)
    assert (summary["base"]["min_ms"], summary["base"]["max_ms"]) == (0.08, 0.10)
    assert summary["new"]["pct_copy"] == pytest.approx(100.0)
    text = ab_libraries.table(list(summary.values()), ["base", "new"])
    assert "| layer_norm_backward 4096x8192 | float32 | 0.0900 (0.0800-0.1000) | 77.8% |" in text


def test_an_output_off_against_torch_or_nan_counts_as_wrong():
    assert ab_libraries.within_tolerance(_run("a", 1.0)["rows"][0])
    assert not ab_libraries.within_tolerance(_run("a", 1.0, err=1e-2)["rows"][0])
    assert not ab_libraries.within_tolerance(_run("a", 1.0, err=float("nan"))["rows"][0])
