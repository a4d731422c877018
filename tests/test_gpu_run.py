"""bench/gpu_run.sh, the one-shot GPU run, as far as a machine without nvcc lets it go."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_runs_without_pythonpath_and_stops_when_the_build_fails(tmp_path: Path) -> None:
    """PYTHONPATH unset (set -u) must not stop the script (issue 11); a failed build must, so no
    stale library in dist/ gets tested."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        OUT=str(tmp_path / "out"),
        CUDACXX=str(tmp_path / "no-nvcc"),  # the gpu build fails at once
        OPFORGE_CACHE=str(tmp_path / "cache"),
        OPFORGE_GPU_STEPS="tests",
    )
    result = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_run.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "unbound variable" not in output
    assert "nvcc" in (tmp_path / "out" / "build.log").read_text()
    assert "gpu_run.sh: the gpu build failed" in output
    assert result.returncode == 1
