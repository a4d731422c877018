"""Benchmarks save new result files; committed figures are never overwritten."""

from __future__ import annotations

import datetime
import json
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from results_file import save


def test_a_second_run_on_one_day_writes_a_new_file(tmp_path, capsys):
    today = datetime.date.today().isoformat()
    first = save({"run": 1}, "core", "AMD EPYC (2 cores)", tmp_path)
    second = save({"run": 2}, "core", "AMD EPYC (2 cores)", tmp_path)
    assert first.name == f"core-amd-epyc-2-cores-{today}.json"
    assert second.name == f"core-amd-epyc-2-cores-{today}-2.json"
    assert json.loads(first.read_text()) == {"run": 1}
    assert json.loads(second.read_text()) == {"run": 2}
    assert f"saved {second}" in capsys.readouterr().out
