"""opforge's kernel library as native PyTorch ops: ``torch.ops.opforge.*`` and helpers here.

Importing this module loads ``_C.so``, which registers the ops in C++ with TORCH_LIBRARY (CPU and,
in GPU builds, CUDA kernels, plus autograd through the library's backward kernels), then registers
their fake kernels so ``torch.compile`` can trace them.
"""

from __future__ import annotations

from pathlib import Path

import torch

torch.ops.load_library(str(Path(__file__).with_name("_C.so")))

from . import _registrations  # noqa: E402,F401  (fake kernels, once the ops exist)

__all__ = ["add", "argmax", "batch_norm", "softmax"]


def add(a: torch.Tensor, b: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    """``a + alpha * b`` (same shape, dtype and device)."""
    return torch.ops.opforge.add(a, b, alpha=alpha)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim``, numerically stable (an all ``-inf`` row gives NaN, as torch)."""
    return torch.ops.opforge.softmax(x, dim)


def argmax(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """int64 index of the first maximum along ``dim``; NaN counts as the maximum."""
    return torch.ops.opforge.argmax(x, dim, keepdim)


def batch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batch norm over dim 1 of an NxC, NxCxL or NxCxHxW tensor: ``(y, save_mean, save_invstd)``.

    Training uses batch statistics and updates ``running_mean``/``running_var`` in place (unbiased
    variance); inference uses the running statistics and returns empty saved statistics.
    """
    return torch.ops.opforge.batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
