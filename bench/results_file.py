"""Saving a benchmark's figures under bench/results/, named after the machine and the date."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save(result: dict, prefix: str, machine: str, out_dir: Path = RESULTS) -> Path:
    """Write ``result`` as a new ``<out_dir>/<prefix>-<machine slug>-<date>.json`` and return
    its path. Results already there (committed figures) are never overwritten: a second run on
    the same day gets ``-2``, ``-3``, ... before ``.json``."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{prefix}-{machine}".lower()).strip("-")
    stem = f"{slug}-{datetime.date.today().isoformat()}"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    for number in range(1, 1000):
        out = out_dir / (f"{stem}.json" if number == 1 else f"{stem}-{number}.json")
        try:
            # "x": created here or not at all, so two runs never write one file.
            with open(out, "x", encoding="utf-8") as handle:
                handle.write(text)
        except FileExistsError:
            continue
        print(f"saved {out}")
        return out
    raise FileExistsError(f"{out_dir} already holds 999 results named {stem}*.json")
