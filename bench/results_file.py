"""Saving a benchmark's figures under bench/results/, named after the machine and the date."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save(result: dict, prefix: str, machine: str, out_dir: Path = RESULTS) -> Path:
    """Write ``result`` as ``<out_dir>/<prefix>-<machine slug>-<date>.json``; return the path."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{prefix}-{machine}".lower()).strip("-")
    out = Path(out_dir) / f"{slug}-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {out}")
    return out
