"""opforge's kernel library as native PyTorch ops: ``torch.ops.opforge.*`` and helpers here.

Importing this module loads ``_C.so``, which registers the ops' CPU and (in GPU builds) CUDA
kernels through LibTorch's stable ABI, so one build serves every torch from 2.11 on; then
``_ops`` (generated from the op table) registers their autograd and fake kernels and defines the
helpers, which behave as the torch calls they mirror.
"""

from __future__ import annotations

from pathlib import Path

import torch


def _load() -> None:
    library = Path(__file__).with_name("_C.so")
    try:
        torch.ops.load_library(str(library))
    except OSError as exc:
        # torch 2.13 raises its own "Could not load this library" with the loader's message
        # (which names the missing libtorch_cuda) as the cause.
        causes = [exc]
        while causes[-1].__cause__ is not None and len(causes) < 8:
            causes.append(causes[-1].__cause__)
        if any("libtorch_cuda" in str(cause) for cause in causes):
            raise ImportError(
                "opforge.torch: this is the GPU build of opforge-torch, which needs a CUDA build "
                f"of torch (this torch, {torch.__version__}, has none): install a CUDA torch, or "
                "the CPU wheel (opforge build --profile cpu)"
            ) from None
        raise ImportError(f"opforge.torch: cannot load {library}: {exc}") from None


_load()

from opforge.torch._ops import *  # noqa: E402,F403
from opforge.torch._ops import __all__  # noqa: E402,F401
