"""The torch.compile backend the compile tests use where they run.

Inductor compiles C++ for the CPU; the runtime image has no compiler, and there the same trace
(Dynamo, fake kernels, functionalisation, symbolic numbers) runs with the aot_eager backend.
"""

from __future__ import annotations

import shutil

COMPILE_BACKEND = "inductor" if shutil.which("c++") or shutil.which("g++") else "aot_eager"
