"""Fake kernels for the opforge ops: output shapes and dtypes, so torch.compile can trace them."""

from __future__ import annotations

import torch

_CONTIGUOUS = torch.contiguous_format


@torch.library.register_fake("opforge::add")
def _add_fake(a, b, *, alpha=1):
    return torch.empty_like(a, memory_format=_CONTIGUOUS)


@torch.library.register_fake("opforge::softmax")
def _softmax_fake(x, dim):
    return torch.empty_like(x, memory_format=_CONTIGUOUS)


@torch.library.register_fake("opforge::softmax_backward")
def _softmax_backward_fake(y, dy, dim):
    return torch.empty_like(y, memory_format=_CONTIGUOUS)


@torch.library.register_fake("opforge::argmax")
def _argmax_fake(x, dim, keepdim=False):
    shape = list(x.shape)
    if shape:
        d = dim % len(shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
    return x.new_empty(shape, dtype=torch.long)


@torch.library.register_fake("opforge::batch_norm")
def _batch_norm_fake(x, weight, bias, running_mean, running_var, training, momentum, eps):
    stats = (x.shape[1],) if training else (0,)
    return (
        torch.empty_like(x, memory_format=_CONTIGUOUS),
        x.new_empty(stats, dtype=torch.float32),
        x.new_empty(stats, dtype=torch.float32),
    )


@torch.library.register_fake("opforge::batch_norm_backward")
def _batch_norm_backward_fake(dy, x, weight, save_mean, save_invstd, eps):
    channels = (x.shape[1],)
    return (
        torch.empty_like(x, memory_format=_CONTIGUOUS),
        x.new_empty(channels, dtype=torch.float32),
        x.new_empty(channels, dtype=torch.float32),
    )


# Autograd is registered in C++ (csrc/ops.cpp): there it costs nothing when no gradient is needed,
# and batch_norm, which mutates its running statistics, is accepted.
