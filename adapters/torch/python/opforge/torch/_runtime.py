"""What the generated autograd and helpers (``_ops.py``) share; nothing here knows an op.

The ops' kernels are registered in C++ (``_C.so``, LibTorch's stable ABI); their autograd is Python
(the stable ABI has no C++ autograd). A helper that needs no gradient calls the kernel directly
(``kernel_keys``), so it pays nothing for autograd; one that does goes through an ``autograd.Function``
with ``setup_context``, so ``torch.func`` transforms work, and forward mode where the op table
gives a ``jvp``. Every transform opforge does not support raises an error naming the op.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import struct
import sys
from collections.abc import Callable

import torch
from torch._C._functorch import TransformType
from torch._functorch import pyfunctorch
from torch.autograd import forward_ad

_grad_enabled = torch.is_grad_enabled
_after_autograd = torch._C._after_autograd_keyset
_compiling = torch.compiler.is_compiling
_is_fake = torch._subclasses.fake_tensor.is_fake


class OpforgeTransformError(RuntimeError):
    """A transform (double backward, forward mode, ...) an op does not support."""


def needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """Whether a call must be recorded: a gradient may be wanted, or a tangent carried."""
    # Not a tensor (a list where a tensor goes): False, so that the dispatcher's schema check
    # refuses it, in one line through argument_error.
    if _grad_enabled() and any(isinstance(t, _Tensor) and t.requires_grad for t in tensors):
        return True
    if forward_ad._current_level < 0:
        return False
    if _functorch_active() or any(isinstance(t, _Tensor) and _legacy_batched(t) for t in tensors):
        # torch.func (jacfwd, hessian), or the older vmap of vectorised forward-mode jacobians
        # (torch.autograd.functional): a tangent may sit under a vmap level, where unpack_dual
        # has no batching rule. The autograd.Function's own jvp and vmap rules handle it.
        return True
    return any(
        isinstance(t, _Tensor) and forward_ad.unpack_dual(t).tangent is not None for t in tensors
    )


def helper_needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """A helper's choice: through the op's ``autograd.Function``, or through the dispatcher.

    Under torch.compile never: the helper calls the op as it is and the compiler runs its
    Autograd-key kernel itself (Dynamo cannot trace an ``autograd.Function`` with a ``jvp``).
    Under ``torch.jit.trace`` never: the trace records the op, whose Autograd-key kernel applies
    the Function when the trace runs (recording the Function too ran the op twice).
    Under torch.func always: a tensor that needs no gradient at this level may at a level under
    a vmap, where the dispatcher's Autograd kernel cannot apply the Function (torch.func's
    ``custom_function_call`` has no kernel there).
    Under ``torch.func.functionalize`` alone only where a gradient is wanted (and then refused,
    ``refuse_functionalize``): through the dispatcher, torch functionalises the op itself.
    """
    return (
        not _compiling()
        and _tracing() is None
        and ((_functorch_active() and not _functionalizing(only=True)) or needs_autograd(*tensors))
    )


def _functionalizing(only: bool = False) -> bool:
    """Whether ``torch.func.functionalize`` is on the transform stack (``only``: and no other
    transform)."""
    if not _functorch_active():
        return False
    keys = [i.key() for i in pyfunctorch.retrieve_all_functorch_interpreters()]
    functionalize = [key == TransformType.Functionalize for key in keys]
    return all(functionalize) if only else any(functionalize)


_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CUDA = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_active = torch._C._are_functorch_transforms_active
# A tensor of a transform's level (torch.func's wrappers, kept past their level by a vjp
# function too) or of the older vmap (torch.autograd.grad's is_grads_batched, gradcheck's
# check_batched_grad, vectorised torch.autograd.functional.jacobian), which sets no flag.
_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_legacy_batched = torch._C._functorch.is_legacy_batchedtensor
_function_modes = torch._C._len_torch_function_stack
_tracing = torch._C._get_tracing_state
_set_tracing = torch._C._set_tracing_state
_strided = torch.strided
_Tensor = torch.Tensor


def kernel_keys(*tensors: torch.Tensor | None) -> torch._C.DispatchKeySet | None:
    """The dispatch keys that reach an op's CPU or CUDA kernel directly, when nothing between has
    work to do; else None (the helper then goes through the dispatcher).

    Taken when no gradient or tangent can be recorded, no dispatch or torch-function mode (fake
    tensors, profiling), no ``torch.func`` transform and no ``torch.jit.trace`` is active,
    torch.compile is not tracing, and every tensor is a plain dense ``torch.Tensor`` on the CPU
    or a CUDA device, wrapped by no transform (a level's wrapper, the older vmap's batch): the
    keys skipped would only pass the call on, at a cost of microseconds (the Autograd key's
    kernel is Python). A negative bit (``x.conj().imag``) and autograd's
    zero tensors must be resolved, and sparse, mkldnn, quantized and nested tensors refused, by
    the dispatcher. torch.compile first: Dynamo folds it to True and must not trace the other
    checks.
    """
    if _recorded_or_transformed() or forward_ad._current_level >= 0:
        return None
    grad = _grad_enabled()
    for t in tensors:
        if t is not None and (
            type(t) is not _Tensor
            or _functorch_wrapped(t)
            or _legacy_batched(t)
            or (grad and t.requires_grad)
            or t.layout is not _strided
            or t.is_neg()
            or t.is_quantized
            or t.is_nested
            or t._is_zerotensor()
        ):
            return None
    first = tensors[0]
    if first is None:
        return None
    if first.is_cuda:
        return _CUDA
    return _CPU if first.is_cpu else None


def _recorded_or_transformed() -> bool:
    """Whether something records or transforms the call: torch.compile (first: Dynamo folds it
    to True and must not trace the other checks), a dispatch or torch-function mode (fake
    tensors, profiling), a ``torch.func`` transform, ``torch.jit.trace``."""
    return (
        _compiling()
        or _dispatch_modes()
        or _function_modes()
        or _functorch_active()
        or _tracing() is not None
    )


def direct_kernel(op: torch._ops.OpOverload):
    """``op.redispatch`` without its Python frame (``_handle`` is torch's own operator handle,
    the same object in every torch the wheel supports)."""
    return op._handle.redispatch_boxed


def autograd_kernel(
    op: torch._ops.OpOverload,
    function: type,
    tensors: tuple[int, ...],
    updated: dict[int, str] | None = None,
    when: int | None = None,
) -> Callable:
    """The Autograd-key kernel of ``op`` for direct ``torch.ops.opforge`` calls.

    ``tensors`` are the positions of the tensor arguments; a call needing autograd goes through
    ``function`` (refused first if an argument it updates in place, at ``updated``, requires
    grad), any other straight to the backend kernel. ``when``: the position of the bool
    argument under which the op updates them (None: every call).
    """

    def kernel(keyset, *args):
        named = {name: args[k] for k, name in updated.items()} if updated else None
        if named and (when is None or args[when]):
            refuse_lazy_bits(op.name(), named)
        elif named:
            args = list(args)
            for k in updated:
                args[k] = resolved_bits(args[k])
        if needs_autograd(*(args[i] for i in tensors)):
            if named:
                refuse_grad_of_updated(op.name(), named)
            refuse_functionalize(op.name().removeprefix("opforge::"))
            state = _tracing()
            if state is None:
                return function.apply(*args)
            # torch.jit.trace has recorded the op already; the Function would add a second node
            # running it again (updating running statistics twice).
            _set_tracing(None)
            try:
                return function.apply(*args)
            finally:
                _set_tracing(state)
        return op.redispatch(keyset & _after_autograd, *args)

    return kernel


def refuse_lazy_bits(op: str, updated: dict) -> None:
    """Refuse, before anything runs, a tensor the op updates in place that carries a negative
    or conjugate bit (a lazily negated view, such as ``x.conj().imag``): torch cannot write an
    op's update through it (its fallback fails an internal assert). Not under torch.compile,
    which cannot trace the test and resolves the bits itself."""
    if _compiling():
        return
    for name, t in updated.items():
        if isinstance(t, _Tensor) and (t.is_neg() or t.is_conj()):
            raise RuntimeError(
                f"opforge::{op.removeprefix('opforge::')}: {name} is updated in place and is a "
                f"lazily negated or conjugated view (such as x.conj().imag): pass "
                f"{name}.resolve_neg() and use the result"
            )


def resolved_bits(t):
    """A tensor the op would update in place but only reads in this call (batch_norm's running
    statistics in inference), its negative or conjugate bit resolved: torch's fallback for the
    bits fails an internal assert on an argument declared as written. Not under torch.compile,
    which resolves the bits itself."""
    if isinstance(t, _Tensor) and not _compiling() and (t.is_neg() or t.is_conj()):
        return t.resolve_neg().resolve_conj()
    return t


def refuse_grad_of_updated(op: str, updated: dict) -> None:
    """Refuse, before anything runs, a tensor the op updates in place (running statistics)
    that requires grad: it is not differentiable, and torch refuses it too."""
    for name, t in updated.items():
        if isinstance(t, _Tensor) and t.requires_grad and _grad_enabled():
            raise RuntimeError(
                f"opforge::{op.removeprefix('opforge::')}: {name} is not differentiable (the op "
                "updates it in place when training): it cannot have requires_grad=True (detach it)"
            )


def underivable_kernel(op: torch._ops.OpOverload, name: str, tensors: tuple[int, ...]) -> Callable:
    """The Autograd-key kernel of an op without a derivative (a backward op).

    Its outputs fail, naming the op, only if something differentiates them: a backward that
    merely calls it works under ``create_graph=True`` and ``torch.func.grad``, while double
    backward through it raises. Forward mode has no such delay and raises at once.
    """

    def kernel(keyset, *args):
        inputs = [args[i] for i in tensors]
        if forward_ad._current_level >= 0 and any(
            t is not None and forward_ad.unpack_dual(t).tangent is not None for t in inputs
        ):
            refuse_forward_mode(name)
        outputs = op.redispatch(keyset & _after_autograd, *args)
        if not _grad_enabled() or not any(t is not None and t.requires_grad for t in inputs):
            return outputs
        return _delayed_error(
            name, outputs, [t for t in inputs if t is not None and t.requires_grad]
        )

    return kernel


def _delayed_error(name: str, outputs, inputs: list[torch.Tensor]):
    # Outputs whose graph node raises when reached; the inputs are passed through the node too,
    # so the node stays connected to the graph that produced them and is reached. The outputs
    # go in as they are: detaching them would, under nested torch.func.grad, cut the node an
    # outer level reaches, which then saw no dependence and returned zeros.
    single = not isinstance(outputs, tuple)
    outputs = (outputs,) if single else outputs
    error = torch._C._functions.DelayedError(
        f"opforge::{name} has no derivative: double backward through an opforge op "
        "(differentiating its gradient: create_graph=True, torch.func.grad of a gradient, "
        "hessian) is not supported".encode(),
        len(outputs) + len(inputs),
    )
    guarded = error(*outputs, *inputs)[: len(outputs)]
    return guarded[0] if single else tuple(guarded)


def refuse_forward_mode(name: str) -> None:
    """Raise from a ``jvp`` of an op the table gives no forward-mode rule for."""
    raise OpforgeTransformError(
        f"opforge::{name}: forward-mode AD (torch.func.jvp, jacfwd, torch.autograd.forward_ad) "
        "is not supported"
    )


def refuse_functionalize(name: str) -> None:
    """Raise under ``torch.func.functionalize`` (at any level of the transform stack): torch has
    no functionalisation rule for an ``autograd.Function``, and its own error names neither the
    op nor opforge."""
    if _functionalizing():
        raise OpforgeTransformError(
            f"opforge::{name}: torch.func.functionalize is supported only around the op alone, "
            "not with gradients or vmap: call the op outside it (torch.compile and torch.export "
            "functionalise opforge's ops themselves)"
        )


def refuse_nested_forward_mode(name: str) -> None:
    """Raise from a ``jvp`` rule run under more than one forward-mode level (``jacfwd`` of
    ``jacfwd``, ``jvp`` of ``jvp``): torch.func does not differentiate an ``autograd.Function``'s
    jvp rule at the outer level, so the second derivative would come back as zeros."""
    forward_levels = sum(
        interpreter.key() == TransformType.Jvp
        for interpreter in pyfunctorch.retrieve_all_functorch_interpreters()
    )
    if forward_levels > 1:
        raise OpforgeTransformError(
            f"opforge::{name}: nested forward-mode AD (jvp of jvp, jacfwd of jacfwd) is not "
            "supported; for second derivatives use torch.func.hessian (forward over reverse)"
        )


def sum_to(grad: torch.Tensor | None, shape: torch.Size) -> torch.Tensor | None:
    """``grad`` summed over the dims broadcasting added to an input of ``shape``."""
    if grad is None or grad.shape == shape:
        return grad
    return grad.sum_to_size(shape)


def linear_tangent(shape: torch.Size, *terms: tuple) -> torch.Tensor | None:
    """The tangent of a linear op: the sum of (tangent, factor) terms, broadcast to ``shape``."""
    total = None
    for tangent, factor in terms:
        if tangent is not None:
            term = tangent if factor == 1 else tangent * factor
            total = term if total is None else total + term
    if total is not None and total.shape != shape:
        total = total.expand(shape).clone()
    return total


def zeros_if_none(tangent: torch.Tensor | None, meta: tuple) -> torch.Tensor:
    """A tangent, or zeros of the input's (shape, dtype, device) when the input has none."""
    if tangent is not None:
        return tangent
    shape, dtype, device = meta
    return torch.zeros(shape, dtype=dtype, device=device)


def vmap_by_loop(
    call: Callable,
    info,
    in_dims: tuple,
    *args,
    updated: dict | None = None,
    when: int | None = None,
    sources: dict | None = None,
    op: str = "",
):
    """A ``vmap`` rule for an op without a batched kernel: one ``call`` per batch element
    (the op's ``autograd.Function.apply``, or the op itself where it has none).

    ``updated`` names the arguments (by position) the op ``op`` updates in place when the bool
    argument at ``when`` is true (``when`` None: always), computing the update from the tensors
    at ``sources`` (None: from any argument). Such an argument left unbatched is updated once,
    as torch updates it, when its update is the same for every element (its sources are
    unbatched too): the other elements update copies. Where the update would differ from one
    element to the next, it is refused before anything runs, as torch's batch_norm refuses
    unbatched running statistics under a batched input.
    """
    once: list[int] = []
    if updated and (when is None or args[when]):
        once = [k for k in updated if isinstance(args[k], torch.Tensor) and in_dims[k] is None]
        inputs = (
            sources if sources is not None else [k for k in range(len(args)) if k not in updated]
        )
        batched = [k for k in inputs if in_dims[k] is not None]
        if once and batched:
            shared = [updated[k] for k in once]
            named = [sources[k] for k in batched] if sources is not None else []
            culprit = (
                f"{' and '.join(named)} {'is' if len(named) == 1 else 'are'}"
                if named
                else "another argument is"
            )
            raise RuntimeError(
                f"opforge::{op}: under vmap it would update {' and '.join(shared)} once per "
                f"batch element: {'it is' if len(shared) == 1 else 'they are'} not batched while "
                f"{culprit} (batch them too, or pass None)"
            )
    # The values before any element updates them: the copies that later elements update.
    pristine = {k: args[k].clone() for k in once}

    def element(i: int) -> list:
        values = [
            a.select(d, i) if d is not None and isinstance(a, torch.Tensor) else a
            for a, d in zip(args, in_dims, strict=True)
        ]
        for k in once if i > 0 else ():
            values[k] = pristine[k].clone()
        return values

    if info.batch_size == 0:
        if once:
            # torch makes the update even with no element: one call, on zeros for the batched
            # arguments (the update is computed from unbatched ones), its outputs dropped.
            call(*_one_element(args, in_dims, _zeros_if_batched))
        return _empty_batch(call, in_dims, args)

    rows = [call(*element(i)) for i in range(info.batch_size)]
    if isinstance(rows[0], tuple):
        outputs = tuple(torch.stack(column) for column in zip(*rows, strict=True))
        return outputs, (0,) * len(outputs)
    return torch.stack(rows), 0


def _one_element(args: tuple, in_dims: tuple, new: Callable) -> list:
    """One element's worth of ``args``: each tensor as ``new(tensor, batch dim or None, shape
    without the batch dim)``; other arguments as they are."""
    values = []
    for a, d in zip(args, in_dims, strict=True):
        if isinstance(a, torch.Tensor):
            shape = list(a.shape)
            if d is not None:
                del shape[d]
            a = new(a, d, shape)
        values.append(a)
    return values


def _zeros_if_batched(a: torch.Tensor, d: int | None, shape: list) -> torch.Tensor:
    return a if d is None else a.new_zeros(shape)


def _meta(a: torch.Tensor, d: int | None, shape: list) -> torch.Tensor:
    return torch.empty(shape, dtype=a.dtype, device="meta")


def _empty_batch(call: Callable, in_dims: tuple, args: tuple):
    """``vmap`` over a batch of size 0: no element to run, so the outputs' shapes come from one
    element's worth of meta tensors (the fake kernels; nothing runs, nothing is updated)."""
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    example = call(*_one_element(args, in_dims, _meta))
    # The outputs still come from the inputs that require grad (through a zero-element slice),
    # so a backward gives those inputs their (empty or zero) gradients, as torch's, and does
    # not raise that the outputs need no grad.
    linked = [
        a.reshape(-1)[:0].sum() for a in args if isinstance(a, torch.Tensor) and a.requires_grad
    ]

    def empty(out: torch.Tensor) -> torch.Tensor:
        result = torch.empty((0, *out.shape), dtype=out.dtype, device=device)
        if linked and result.dtype.is_floating_point:
            result = result + sum(linked).to(result.dtype)
        return result

    if isinstance(example, tuple):
        return tuple(empty(o) for o in example), (0,) * len(example)
    return empty(example), 0


_FLOATING = (torch.float32, torch.float16, torch.bfloat16)
_FLOAT32_MAX = torch.finfo(torch.float32).max
_HALF = (torch.float16, torch.bfloat16)


def _number_dtype(value: bool | int | float | complex) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, complex):
        return _TO_COMPLEX[torch.get_default_dtype()]
    return torch.int64 if isinstance(value, int) else torch.get_default_dtype()


def _promoted(dtypes: list[torch.dtype]) -> torch.dtype | None:
    result = None
    for dtype in dtypes:
        result = dtype if result is None else torch.promote_types(result, dtype)
    return result


# toComplexType of c10 for the floating types (bfloat16 has no complex type of its own).
_TO_COMPLEX = {
    torch.float16: torch.complex32,
    torch.bfloat16: torch.complex64,
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    # c10's combine_categories: a lower priority class only counts from a higher category, and
    # complex is above floating (a 0-d complex tensor beside a float16 one gives complex32).
    if higher is None:
        return lower
    if higher.is_complex:
        return higher
    if lower is not None and lower.is_complex:
        # float8 has no complex type: torch refuses the pair, and so does the caller.
        return _TO_COMPLEX.get(higher, lower) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if lower is not None and (higher == torch.bool or lower.is_floating_point):
        return torch.promote_types(higher, lower)
    return higher


def result_dtype(a, b) -> torch.dtype:
    """``torch.result_type(a, b)`` for tensors and Python numbers, by torch's rule (tensors with
    dims, then 0-d tensors, then numbers), in code torch.compile traces (it cannot trace
    ``torch.result_type``)."""
    values = (a, b)
    dims = [v.dtype for v in values if isinstance(v, torch.Tensor) and v.dim() > 0]
    zero_dim = [v.dtype for v in values if isinstance(v, torch.Tensor) and v.dim() == 0]
    numbers = [_number_dtype(v) for v in values if not isinstance(v, torch.Tensor)]
    return _combine(_promoted(dims), _combine(_promoted(zero_dim), _promoted(numbers)))


def _rounds_away(value, dtype: torch.dtype) -> bool:
    # A number that float16 or bfloat16 would turn into 0, a subnormal or inf.
    magnitude = abs(float(value))
    info = torch.finfo(dtype)
    return magnitude != 0.0 and magnitude != float("inf") and not info.tiny <= magnitude <= info.max


def _read_unrounded(name: str, position: int, value, dtype: torch.dtype, device) -> bool:
    """Whether torch reads a float16/bfloat16 op's other operand (a number or a 0-d tensor of
    another dtype) in float32, where rounding it to ``dtype`` first would change the result
    beyond a rounding of the result.

    torch's CUDA kernels read a CPU scalar (a Python number, a 0-d CPU tensor) unrounded, in
    either position; its CPU kernels round the operand to the dtype first, except mul's second
    operand. A 0-d CUDA tensor is cast to the dtype like any operand.
    """
    if device.type == "cpu" and not (name == "mul" and position == 1):
        return False
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and value.device.type == "cpu" and value.dtype != dtype
    if torch.compiler.is_compiling():
        # Traced with dynamic shapes a float is symbolic, and Dynamo cannot run the checks
        # below on it (_holds recursed without end): read it unrounded, which gives the same
        # result for a number the dtype holds.
        return True
    # A sum can cancel down to the rounding error of the number (-59904 + 70000 in bfloat16 is
    # 10096 unrounded, 10240 from 70000 rounded), and a product rounds once, not twice: both
    # keep any number the dtype cannot hold.
    return _rounds_away(value, dtype) or not _holds(value, dtype)


def _holds(value, dtype: torch.dtype) -> bool:
    """Whether float16 or bfloat16 holds the number exactly."""
    number = float(value)
    if number != value:
        return False
    try:
        if dtype == torch.float16:
            return struct.unpack("e", struct.pack("e", number))[0] == number
        bits = struct.unpack("I", struct.pack("f", number))[0]
    except (OverflowError, struct.error):
        return False
    return struct.unpack("f", struct.pack("I", bits))[0] == value and bits & 0xFFFF == 0


def _scalar(value, dtype: torch.dtype, device, like: torch.Tensor | None = None) -> torch.Tensor:
    """A 0-d tensor of ``value`` in ``dtype`` on ``device``, beside the operand ``like``: on a
    CUDA device in plain eager code, the one kept from an earlier call (``_kept_constant``)."""
    if device.type == "cuda" and _plain_eager(like):
        return _kept_constant(value, dtype, device)
    return _made_scalar(value, dtype, device)


def _made_scalar(value, dtype: torch.dtype, device) -> torch.Tensor:
    # torch.full fills it on the device (scalar_tensor fills it on the host and copies it
    # over). A number past the dtype's range becomes inf, as torch's cast of it, where the fill
    # would refuse it.
    if not isinstance(value, bool) and abs(float(value)) > torch.finfo(dtype).max:
        return torch.full((), float(value), dtype=torch.float64, device=device).to(dtype)
    return torch.full((), value, dtype=dtype, device=device)


# 0-d CUDA tensors of the numbers operands were given, by (number, dtype, device): making one
# launches a fill, about 10 us a call on an H100 host (bench/results/torch-overhead-*). A
# number is kept from its second call on (keeping synchronises a stream once, which a number
# that changes every step, a learning rate's warm-up say, must not pay each time). They are
# never freed (a freed block could be handed out again while another stream still reads it)
# nor written, and at most _KEPT_AT_MOST are kept; past that each call makes its own.
_KEPT: dict[tuple, torch.Tensor] = {}
_KEPT_AT_MOST = 1024
_SEEN: set[tuple] = set()  # numbers seen once (all forgotten past 4 * _KEPT_AT_MOST of them)


def _plain_eager(like: torch.Tensor | None) -> bool:
    """Whether a kept constant may stand beside ``like``: nothing records or transforms the call
    (torch.compile, jit.trace, a dispatch or torch-function mode such as fake tensors, a
    torch.func transform), and ``like`` is a plain tensor or absent."""
    return not _recorded_or_transformed() and (like is None or type(like) is _Tensor)


def _kept_constant(value, dtype: torch.dtype, device) -> torch.Tensor:
    # Keyed by the number's bits: -0.0 and 0.0 differ, and a NaN finds its own.
    bits = struct.pack("<d", value) if isinstance(value, float) else value
    key = (type(value), bits, dtype, device)
    kept = _KEPT.get(key)
    if kept is not None:
        return kept
    if (
        len(_KEPT) >= _KEPT_AT_MOST
        # While a CUDA graph is captured the fill would only be recorded, not run.
        or torch.cuda.is_current_stream_capturing()
        # The synchronisation below would warn, or raise, where the caller asked torch to.
        or torch.cuda.get_sync_debug_mode() != 0
    ):
        return _made_scalar(value, dtype, device)
    if key not in _SEEN:
        if len(_SEEN) >= 4 * _KEPT_AT_MOST:
            _SEEN.clear()
        _SEEN.add(key)
        return _made_scalar(value, dtype, device)
    with torch.inference_mode(False):  # an inference tensor could not be saved for a backward
        kept = _made_scalar(value, dtype, device)
    # Filled before any stream reads it, whichever stream that is.
    torch.cuda.current_stream(device).synchronize()
    _KEPT[key] = kept
    return kept


def require_64_bits(function: str, what: str, value) -> None:
    """Refuse an int past 64 bits as torch does ("int too big to convert", without naming the
    call): torch takes -2**63 to 2**64 - 1, signed or not, from Python; from NumPy, whose
    integers it reads as int64, it refuses a uint64 past 2**63 - 1 ("an integer is required")."""
    if _numpy_scalar(value) and value.dtype.kind == "u" and int(value) >= 2**63:
        raise TypeError(
            f"opforge.torch.{function}: {what} numpy.{type(value).__name__}({value}) is past "
            "2**63 - 1, which torch does not take from NumPy; pass a Python int"
        )
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        # str() of a huge int is slow, and refused past 4300 digits.
        shown = str(value) if abs(value) < 10**20 else f"of {abs(value).bit_length()} bits"
        raise OverflowError(
            f"opforge.torch.{function}: {what} {shown} does not fit 64 bits (torch takes -2**63 "
            "to 2**64 - 1)"
        )


def promote(name: str, a, b) -> tuple[torch.Tensor, torch.Tensor, torch.dtype | None]:
    """Two operands as tensors of one dtype under torch's type promotion, and the dtype the
    result must be cast to afterwards (None: the operands' own).

    Python numbers and 0-d CPU tensors become 0-d tensors on the other operand's device (as
    torch takes them beside CUDA tensors); two numbers, 0-d CPU tensors of the default dtype (as
    torch's ``add(2.0, 3.0)``); results outside float32, float16 and bfloat16 are refused naming
    the function, as NotImplementedError (torch computes them, opforge has no kernel for them). A float16 or bfloat16 result is
    computed in float32 from the operands as given, and cast down once, where torch reads the
    other operand unrounded and rounding it would change it (``_read_unrounded``); else in the
    dtype, that operand rounded to it first, as torch's.
    """
    if (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and a.is_cuda == b.is_cuda
        and a.is_meta == b.is_meta
    ):
        return a, b, None
    if (
        type(b) is float
        and type(a) is torch.Tensor
        and a.dtype in _FLOATING
        and (a.dim() > 0 or a.is_cuda)
    ):
        # The usual mixed call, x * 0.5: the number leaves the tensor's dtype as it is.
        return _converted(name, a, b, a.dtype, a.device)
    for value in (a, b):
        require_64_bits(name, "an int operand", value)
    a, b = _plain_number(a), _plain_number(b)
    for value in (a, b):
        if not isinstance(value, (torch.Tensor, bool, int, float, complex)):
            raise TypeError(
                f"opforge.torch.{name}: operands are tensors or Python numbers, got "
                f"{type(value).__name__}"
            )
        if isinstance(value, torch.Tensor) and value.is_quantized:
            # torch's promote_types refuses quantized dtypes in a many-line message.
            raise _other_backend(f"opforge::{name}", f"Quantized{value.device.type.upper()}")
    try:
        dtype = result_dtype(a, b)
    except RuntimeError:  # torch's promote_types refuses bits dtypes beside others
        dtypes = " and ".join(
            str(v.dtype if isinstance(v, torch.Tensor) else type(v).__name__).removeprefix("torch.")
            for v in (a, b)
        )
        raise NotImplementedError(
            f"opforge.torch.{name}: operands of {dtypes} have no common dtype; opforge computes "
            "float32, float16 and bfloat16"
        ) from None
    if dtype not in _FLOATING:
        raise NotImplementedError(
            f"opforge.torch.{name}: the result dtype would be {dtype}; opforge computes float32, "
            "float16 and bfloat16"
        )
    tensors = [v for v in (a, b) if isinstance(v, torch.Tensor)]
    if not tensors:
        device = torch.device("cpu")
    else:
        device = next((t.device for t in tensors if t.dim() > 0 or t.is_cuda), tensors[0].device)
    return _converted(name, a, b, dtype, device)


def _converted(name: str, a, b, dtype: torch.dtype, device) -> tuple:
    """``promote``'s result for operands of result ``dtype`` on ``device``."""
    if (
        name == "mul"
        and dtype in _HALF
        and device.type == "cpu"
        and isinstance(b, torch.Tensor)
        and _constant_number(a)
    ):
        # A number (or a 0-d CPU tensor that needs no gradient) before the tensor: torch's CPU
        # kernel rounds it to the dtype (7e4 is inf in float16), its backward multiplies by it
        # as given. Folded as mul's scale, rounded for the forward (the product is the same
        # either way round), as given for the backward.
        number = float(a.item() if isinstance(a, torch.Tensor) else a)
        scale = number if _holds(number, dtype) else rounded_on_cpu("mul", number, dtype, b)
        return (b if b.dtype == dtype else b.to(dtype)), scale, None
    if (
        dtype in _HALF
        and not isinstance(b, torch.Tensor)
        and isinstance(a, torch.Tensor)
        and (
            name == "mul"
            or (abs(float(b)) <= _FLOAT32_MAX and _read_unrounded(name, 1, b, dtype, device))
        )
    ):
        # torch's kernel reads the number unrounded, in float32: it goes in as add's alpha or
        # mul's scale (folded_factor), beside a 0-d one (unit_if_folded), and the kernel applies
        # it in float32, so the op runs in the dtype without float32 copies of the tensor. mul
        # folds every number, as torch reads its second operand unrounded on every device: one
        # the dtype holds gives the same product either way, and no check of it is needed.
        # Left as it is where it has the dtype: a traced .to(dtype) would convert other dtypes
        # silently; without it the op refuses them (its operands' dtypes then differ).
        return (a if a.dtype == dtype else a.to(dtype)), float(b), None
    compute, cast = dtype, None
    # Two numbers are two 0-d tensors of the default dtype to torch, each rounded to it.
    if (
        dtype in _HALF
        and any(isinstance(v, torch.Tensor) for v in (a, b))
        and any(_read_unrounded(name, i, v, dtype, device) for i, v in enumerate((a, b)))
    ):
        compute, cast = torch.float32, dtype
        if _tracing() is not None:
            raise RuntimeError(
                f"opforge.torch.{name}: under torch.jit.trace, operands of two dtypes that "
                f"opforge computes in float32 and casts back to {_dtype_word(dtype)} would be "
                "cast so for inputs of any dtype; trace with operands of one dtype"
            )
    like = a if isinstance(a, torch.Tensor) else b if isinstance(b, torch.Tensor) else None
    a, b = (
        _operand(v, compute, device)
        if isinstance(v, torch.Tensor)
        else _scalar(v, compute, device, like)
        for v in (a, b)
    )
    return a, b, cast


def _constant_number(value) -> bool:
    """Whether ``value`` is a number in plain eager code: a Python number, or a 0-d CPU tensor
    that needs no gradient (traced, its value would be baked in)."""
    if not isinstance(value, torch.Tensor):
        return not _compiling()
    return (
        value.dim() == 0
        and value.device.type == "cpu"
        and not value.requires_grad
        and forward_ad._current_level < 0  # a dual tensor needs no grad but has a tangent
        and _plain_eager(value)
    )


class RoundedNumber(float):
    """A number as a float16/bfloat16 kernel on the CPU reads it, rounded to the dtype, that
    remembers the number it was ``given``: torch's CPU forward rounds it (add's alpha, mul's
    number before the tensor) while its backward multiplies by the number as given (1e-7 is
    5.96e-8 in float16, 7e4 is inf)."""

    given: float

    def __new__(cls, given: float, dtype: torch.dtype) -> RoundedNumber:
        rounded = super().__new__(cls, torch.tensor(given, dtype=dtype).item())
        rounded.given = given
        return rounded


def rounded_on_cpu(function: str, given: float, dtype: torch.dtype, *operands) -> RoundedNumber:
    """``given`` as a RoundedNumber; refused while ``torch.jit.trace`` records a call whose
    operands may need a gradient: the trace keeps only the rounded number, which its backward
    would then take."""
    if _tracing() is not None and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in operands
    ):
        raise RuntimeError(
            f"opforge.torch.{function}: under torch.jit.trace, {given!r} would reach the "
            f"gradient rounded to {_dtype_word(dtype)} on the CPU, where torch's backward "
            "takes it as given; trace with operands that need no gradient, or in float32"
        )
    return RoundedNumber(given, dtype)


def as_given(value):
    """A scalar argument as the backward and forward-mode rules take it: a ``RoundedNumber``
    as the number it was given, anything else as it is."""
    return value.given if isinstance(value, RoundedNumber) else value


def _numpy_scalar(value) -> bool:
    # NumPy itself is not imported: a runtime image may lack it. A 0-d array is not a scalar.
    return (
        type(value).__module__ == "numpy"
        and getattr(value, "ndim", None) == 0
        and not _is_array(value)
    )


def _plain_number(value):
    # A NumPy scalar is the Python number it holds to torch's promotion; a NumPy array, even
    # 0-d, torch refuses.
    return value.item() if _numpy_scalar(value) else value


def _operand(t: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    # A 0-d CPU tensor is a scalar to torch, taken beside CUDA tensors: it moves to their device.
    # Any other tensor stays where it is (the op refuses a device mismatch).
    if t.dim() == 0 and t.device != device and t.device.type == "cpu":
        return t.to(device=device, dtype=dtype)
    # Not converted where it has the dtype: a traced .to(dtype) would convert other dtypes
    # silently; without it the op refuses them.
    return t if t.dtype == dtype else t.to(dtype)


def cast_result(out: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A promoted op's result in the dtype ``promote`` said it must have."""
    return out if dtype is None else out.to(dtype)


_SCHEMA_MISMATCH = re.compile(
    r"^(opforge::\w+)\(\) Expected a value of type '(.+?)' for argument '(\w+)' but instead "
    r"found type '(\w+)'\.\nPosition: \d+\nValue: (.*)$",
    re.MULTILINE,
)


_OTHER_BACKEND = re.compile(
    r"^Could not run '(opforge::\w+)' with arguments from the '(\w+)' backend"
)
_CONVERSIONS = (
    ("Sparse", ".to_dense()"),
    ("Mkldnn", ".to_dense()"),
    ("Quantized", ".dequantize()"),
    ("Nested", ".to_padded_tensor(0) or .unbind()"),
)


# A tensor subclass without a rule for the op (a jagged nested tensor) raises with the op's name.
_SUBCLASS_REFUSAL = re.compile(r"^opforge\.(\w+)\.default$")


def _other_backend(op: str, backend: str) -> NotImplementedError:
    convert = next((c for kind, c in _CONVERSIONS if kind in backend), None)
    hint = f": convert it with {convert}" if convert else ""
    return NotImplementedError(
        f"{op}: takes dense (strided) CPU and CUDA tensors, got a tensor of the {backend} "
        f"backend{hint}"
    )


def argument_error(exc: RuntimeError, checks: Callable, args: tuple) -> Exception:
    """torch's many-line schema mismatch (an argument of the wrong type) as one line naming the
    op and the argument, and its many-line refusal of a tensor of another backend (sparse,
    mkldnn, quantized, nested) as one line with the conversion; a refusal by the op's checks
    (``checks``, called with the op's ``args``) as the exception torch raises for it
    (``_typed``); any other error as it is."""
    other = _OTHER_BACKEND.match(str(exc))
    if other is not None:
        return _other_backend(*other.groups())
    subclass = _SUBCLASS_REFUSAL.match(str(exc))
    if subclass is not None and isinstance(exc, NotImplementedError):
        return NotImplementedError(
            f"opforge::{subclass.group(1)}: takes dense (strided) CPU and CUDA tensors; a tensor "
            "subclass (such as a jagged nested tensor) has no rule for it: pass plain tensors"
        )
    found = _SCHEMA_MISMATCH.match(str(exc))
    if found is None:
        return _typed(exc, checks, args)
    op, expected, name, got, value = found.groups()
    optional = expected.startswith("Optional[")
    kind = expected[len("Optional[") : -1] if optional else expected
    if got == kind:
        # An int past 64 bits, which torch's parser refuses as ValueError ("Overflow when
        # unpacking long long").
        return ValueError(f"{op}: {name} is out of range for a 64-bit {kind}, got {value}")
    wanted = {"int": "an int", "float": "a number", "bool": "a bool", "str": "a string"}.get(
        kind, kind
    )
    return TypeError(
        f"{op}: {name} must be {wanted}{' or None' if optional else ''}, got {got} {value}"
    )


def _typed(exc: RuntimeError, checks: Callable, args: tuple) -> Exception:
    """``exc`` as the exception torch raises for the same problem (IndexError for a dim out of
    range, ...), where the kernel library refused the call.

    Its errors cross LibTorch's stable ABI as RuntimeError, whatever their kind. The op's checks
    in Python (its fake kernel's: the library's checks, in its order and words) raise the type
    the op table gives each; called only once the call has failed, their refusal is taken only
    where it names the same problem in the same words, else ``exc`` stays as it is.
    """
    try:
        checks(*args)
    except Exception as refusal:  # whatever they raise, exc stands unless it is the same words
        if str(refusal) == str(exc) and type(refusal) is not type(exc):
            return type(refusal)(str(exc))
        if _UNNAMED_DTYPE.search(str(exc)):
            return refusal  # the checks name the dtype (and argument) the stable ABI could not
    return exc


# A dtype DLPack has no code for (float8, complex32) reaches the library unnamed; one the stable
# ABI has no conversion for (bits16) fails in LibTorch before opforge's code, naming neither.
_UNNAMED_DTYPE = re.compile(r"unsupported \(DLPack code \d+\)|Not yet supported ScalarType")


def _shown(value) -> str:
    # The value's repr on one line (a masked array's spans three), and not at any length.
    shown = " ".join(repr(value).split())
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _wrong_type(function: str, name: str, wanted: str, value) -> TypeError:
    return TypeError(
        f"opforge.torch.{function}: {name} must be {wanted}, got {type(value).__name__} "
        f"{_shown(value)}"
    )


def _dtype_kind(value) -> str | None:
    """'b', 'i', 'u', 'f' or 'c' for a tensor or a NumPy scalar; None for anything else."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            return "b"
        return "f" if value.is_floating_point() or value.is_complex() else "i"
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind if isinstance(kind, str) else None


def _is_array(value) -> bool:
    # A NumPy array, 0-d too, or one of its subclasses (a masked array, a matrix, a memmap),
    # which torch's parser refuses where it takes a NumPy scalar. NumPy is not imported: a
    # runtime image may lack it, and an array exists only where it is loaded.
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _traced_number(function: str, name: str, value, kind: str) -> None:
    """Refuse, while torch.compile traces, a number argument given as a tensor or a NumPy
    number (which Dynamo makes an array): opforge's ops take their numbers when the graph is
    traced, and these have a value only when it runs. Callers have taken None and Python numbers
    already; bools go on to their own checks. The message is fixed text: Dynamo cannot take the
    repr of what it traces."""
    if _compiling() and not isinstance(value, (int, float, torch.SymInt, torch.SymFloat)):
        raise TypeError(
            f"opforge.torch.{function}: {name} must be a Python {kind} under torch.compile (a "
            "tensor or a NumPy number is a value of the graph, known only when it runs): pass "
            f"{kind}({name}) from outside the compiled function"
        )


def int_argument(function: str, name: str, value, *, optional: bool = False) -> None:
    """Refuse what torch's parser refuses for an int argument (``optional``: or None) and the
    dispatcher would take (as a bool, a float's integer part, or a dtype's number): anything but
    an int, a NumPy integer or a 0-d integer tensor (while torch.compile traces: an int). None
    is left to the op's own checks, which name it."""
    if value is None or (isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)):
        return  # also torch.compile's symbolic ints, which the checks below cannot trace
    _traced_number(function, name, value, "int")
    if isinstance(value, torch.Tensor):
        integer = value.dim() == 0 and _dtype_kind(value) == "i"
    else:
        integer = not _is_array(value) and _dtype_kind(value) in ("i", "u")
    if not integer:
        raise _wrong_type(function, name, "an int or None" if optional else "an int", value)


def float_argument(function: str, name: str, value) -> None:
    """Refuse what torch's parser refuses for a float argument and the dispatcher would take: a
    tensor with dims, a tensor that requires grad (the op would drop its gradient), a NumPy
    array. A 0-d tensor that needs no grad is a number to both (while torch.compile traces, only
    a Python number is)."""
    if isinstance(value, (int, float)) or value is None:
        return  # None and bools: the op's own checks name them
    _traced_number(function, name, value, "float")
    if (isinstance(value, torch.Tensor) and (value.dim() != 0 or value.requires_grad)) or (
        _is_array(value)
    ):
        raise _wrong_type(function, name, "a number (a 0-d tensor if it needs no grad)", value)


def bool_argument(function: str, name: str, value) -> None:
    """Refuse what torch's parser refuses for a bool argument and the dispatcher would take as
    its truth value: anything but a bool (None, a number, a NumPy scalar, a tensor)."""
    if not isinstance(value, (bool, torch.SymBool)):
        raise _wrong_type(function, name, "a bool", value)


def missing_tensor(op: str, required: dict) -> TypeError:
    """The error for a required tensor argument given as None."""
    name = next(n for n, t in required.items() if t is None)
    return TypeError(f"opforge::{op}: {name} must be a Tensor, got None")


def out_not_supported(function: str) -> TypeError:
    """The error for ``out=`` given a tensor, where torch's own call takes one: opforge's helpers
    return new tensors, and do not mirror what ``out=`` does in torch (resizing it, casting to its
    dtype, refusing it under autograd), so it is refused rather than half honoured."""
    return TypeError(
        f"opforge.torch.{function}: out= is not supported, the result is always a new tensor: "
        f"assign it, or copy it in with out.copy_(opforge.torch.{function}(...))"
    )


def cast_first(function: str, tensor, dtype):
    """A tensor cast to a ``dtype=`` argument first (None: as it is); anything but a tensor is
    left to the op's checks, which name it."""
    if dtype is None:
        return tensor
    dtype = dtype_argument(function, dtype)
    if dtype not in _FLOATING:
        # The op's own check would name the cast tensor's dtype as the input's.
        raise NotImplementedError(
            f"opforge.torch.{function}: dtype={str(dtype).removeprefix('torch.')} is not "
            "supported: pass torch.float32, torch.float16 or torch.bfloat16"
        )
    return tensor.to(dtype) if isinstance(tensor, torch.Tensor) else tensor


def dtype_argument(function: str, dtype) -> torch.dtype:
    """A ``dtype=`` argument, refused naming the helper unless a ``torch.dtype`` (a string
    would reach ``Tensor.to`` as a device name)."""
    if not isinstance(dtype, torch.dtype):
        raise _wrong_type(function, "dtype", "a torch.dtype or None", dtype)
    return dtype


def float_alpha(alpha, operand: torch.Tensor, other=None):
    """add's alpha, refused where torch refuses it for a floating result, with torch's
    exception: a bool (or bool tensor) or a complex number (RuntimeError), an int past 64 bits
    (OverflowError), a finite number past the range of the type torch converts it to
    (RuntimeError; the operand's dtype on CPU, float32 for every dtype on CUDA, which computes
    in it). On CPU a float16/bfloat16 op takes alpha rounded to the dtype, as torch's CPU kernel
    (1e-8 is 0 in float16, and 0 * inf is NaN). Times ``other`` where ``promote`` left that a
    number to fold into alpha.

    Traced by torch.compile, an int or float alpha goes to the kernel as it is, unrounded and
    unchecked, as compiled torch (inductor) takes it: with dynamic shapes it is symbolic, with
    no value to check or round while the graph is traced (Dynamo cannot run these checks on
    it). Where alpha is not a number, or a bool beside bool operands, the op's own checks
    refuse the call, naming what is wrong."""
    if type(alpha) in (int, float) and torch.compiler.is_compiling():
        return alpha * other if isinstance(other, float) else alpha
    if (
        isinstance(alpha, bool)
        and isinstance(operand, torch.Tensor)
        and operand.dtype == torch.bool
    ):
        return alpha
    # Every dtype holds an alpha up to float16's largest: the usual case, checked at once.
    plain = type(alpha) in (int, float)
    if not (plain and abs(alpha) <= 65504.0):
        _alpha_kind(alpha)
        require_64_bits("add", "alpha", alpha)
        _alpha_fits(alpha, operand)
    if not isinstance(alpha, (int, float, torch.Tensor)) and not _numpy_scalar(alpha):
        # torch's parser takes a Python or NumPy number (or a 0-d tensor) only.
        raise TypeError(
            f"opforge::add: alpha must be a number, got {type(alpha).__name__} {_shown(alpha)}"
        )
    if (
        isinstance(operand, torch.Tensor)
        and operand.dtype in _HALF
        and operand.device.type == "cpu"
        and not (plain and alpha == 1)
        and not _holds(float(alpha), operand.dtype)
    ):
        alpha = rounded_on_cpu("add", float(alpha), operand.dtype, operand, other)
    elif (
        (plain or _numpy_scalar(alpha))
        and not (plain and alpha == 1)  # add's default: no rounding to do on every call
        and isinstance(operand, torch.Tensor)
        and operand.dtype.is_floating_point
    ):
        # Every other kernel of torch's takes alpha in float32: a float32 result's own dtype,
        # and a 2-byte one's opmath on CUDA (0.7 as a double gave 1-ulp differences in about a
        # fifth of float32 elements).
        alpha = _float32(float(alpha))
    # float(): a NumPy or 0-d tensor alpha would otherwise keep its own type in the product.
    return float(alpha) * other if isinstance(other, float) else alpha


def _float32(value: float) -> float:
    """``value`` rounded to float32 (past its range: inf, as a cast gives)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _alpha_kind(alpha) -> None:
    # torch takes a bool or complex alpha as a Scalar and refuses it in the kernel, as
    # RuntimeError; a NumPy bool is a number 0 or 1 to it.
    kind = _dtype_kind(alpha) if not isinstance(alpha, (bool, complex)) else None
    if isinstance(alpha, bool) or (isinstance(alpha, torch.Tensor) and kind == "b"):
        raise RuntimeError(
            "opforge.torch.add: a bool alpha is only supported for bool results, got "
            f"{_shown(alpha)}: pass a number"
        )
    if (
        isinstance(alpha, complex)
        or (isinstance(alpha, torch.Tensor) and alpha.is_complex())
        or (kind == "c")
    ):
        raise RuntimeError(
            "opforge.torch.add: alpha must not be a complex number for real tensors, got "
            f"{_shown(alpha)}"
        )


def _alpha_fits(alpha, operand: torch.Tensor) -> None:
    if isinstance(alpha, torch.Tensor) and alpha.dim() == 0 and not alpha.is_complex():
        alpha = alpha.item()  # torch converts a 0-d tensor alpha as the number it holds
    if not isinstance(alpha, numbers.Real) or not isinstance(operand, torch.Tensor):
        return
    if not operand.dtype.is_floating_point or not math.isfinite(alpha):
        return
    dtype = operand.dtype if operand.device.type == "cpu" else torch.float32
    largest = torch.finfo(dtype).max
    if abs(alpha) > largest:
        raise RuntimeError(
            f"opforge.torch.add: alpha {alpha:g} does not fit "
            f"{str(dtype).removeprefix('torch.')}, as torch refuses it: pass |alpha| <= {largest:g}"
        )


def unit_if_folded(other, like: torch.Tensor):
    """add's or mul's second operand: ``other``, or a 0-d one of ``like``'s dtype and device
    where ``promote`` left ``other`` a number to fold into add's alpha (``float_alpha``) or
    mul's scale (``folded_factor``)."""
    if not isinstance(other, float):
        return other
    return _scalar(1.0, like.dtype, like.device, like)


def folded_factor(other) -> float:
    """mul's scale: the number ``promote`` left ``other`` to be read in float32, else 1."""
    return other if isinstance(other, float) else 1.0


def _flattened(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() > 4


def channels_by_rest(x, training):
    """batch_norm's input as the kernels take it: N x C x L for a tensor of more than 4 dims
    (BatchNorm3d's N x C x D x H x W, L = D * H * W; a view where the layout allows), else as
    it is. Statistics are per channel either way. A 0-d or 1-d input, which has no channel
    dim, is refused here, naming it (the kernels take 2 to 4 dims)."""
    if isinstance(x, torch.Tensor) and x.dim() < 2:
        raise RuntimeError(
            f"opforge.torch.batch_norm: input must have a batch and a channel dim (N x C x ...), "
            f"got shape {list(x.shape)}"
        )
    if not _flattened(x):
        return x
    if training is True and x.shape[0] * math.prod(x.shape[2:]) == 1:
        # The kernels' check would name the flattened shape.
        raise ValueError(
            "opforge.torch.batch_norm: training needs more than 1 value per channel, got input "
            f"of shape {list(x.shape)}"
        )
    return x.flatten(2)


def shaped_as(y: torch.Tensor, x) -> torch.Tensor:
    """batch_norm's result in its input's shape (``channels_by_rest`` undone)."""
    return y.reshape(x.shape) if _flattened(x) else y


def weight_as_taken(weight, x):
    """rms_norm's weight as the kernels take it (float32 or the input's dtype). One of another
    floating dtype (float16 beside a float32 input, bfloat16 beside float16, float64), which
    torch applies in float32 too and casts the result to the input's dtype, becomes a float32
    copy: differentiable, so its gradient comes back in the weight's own dtype."""
    if (
        isinstance(weight, torch.Tensor)
        and isinstance(x, torch.Tensor)
        and weight.dtype in _PROMOTED_WEIGHTS
        and weight.dtype != x.dtype
    ):
        return weight.float()
    return weight  # float8 and the rest: the kernels' check names them, as torch refuses them


# The weight dtypes torch promotes beside a floating input (float8 it refuses).
_PROMOTED_WEIGHTS = (torch.float16, torch.bfloat16, torch.float64)


def float_channels(t, x, name: str, *others, updated: bool = False):
    """batch_norm's parameter ``name`` (weight, bias or a running statistic) as the kernels
    take it: float32. One in the input's 2-byte dtype (as torch's CPU call takes them, and
    OpInfo's samples give) becomes a float32 copy: differentiable for weight and bias, copied
    back (``write_back``) for the running statistics the call updates. Any other is left for
    the kernels' check to name.

    ``others``: the call's other parameters, the other running statistic first. Beside a 2-byte
    input torch takes them all float32 or all in its dtype, and refuses a mix. A running
    statistic the call ``updated`` is first checked as the kernels check the caller's own: the
    copies would hide an expanded view, or one statistic overlapping the other, from them (the
    write-back then failed half done)."""
    if not (isinstance(t, torch.Tensor) and isinstance(x, torch.Tensor) and x.dtype in _HALF):
        return t
    taken = (x.dtype, torch.float32)
    if t.dtype not in taken:
        return t  # the kernels' check names it
    for other in others:
        if isinstance(other, torch.Tensor) and other.dtype in taken and other.dtype != t.dtype:
            raise RuntimeError(
                f"opforge.torch.batch_norm: beside a {_dtype_word(x.dtype)} input, the weight, "
                "bias and running statistics must all be float32 or all the input's dtype, got "
                f"{_dtype_word(t.dtype)} and {_dtype_word(other.dtype)}"
            )
    if t.dtype != x.dtype:
        return t
    if updated:
        if _functorch_active():
            # The write-back of the float32 copy is an in-place copy_ into a tensor the
            # transform did not make, which torch.func refuses in its own words.
            raise NotImplementedError(
                f"opforge.torch.batch_norm: training with {_dtype_word(t.dtype)} running "
                "statistics under a torch.func transform (grad, vmap, jacrev, ...) is not "
                "supported: opforge updates float32 copies of them; pass float32 statistics"
            )
        _refuse_overlap(name, t, others[0])
    return t.float()


def _dtype_word(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _refuse_overlap(name: str, t: torch.Tensor, other) -> None:
    """Refuse a 2-byte running statistic ``name`` the kernels would refuse in float32: one
    with overlapping elements, or one overlapping ``other``, the other statistic (in the
    kernels' own words). torch.compile and torch.export trace with fake tensors, which have
    neither addresses nor (for Dynamo) storage offsets: there a stride of 0 (an expanded
    statistic) stands for overlapping elements, and the two statistics may not be views of one
    tensor at all."""
    traced = _compiling() or _is_fake(t)
    if traced:
        internal = any(
            size > 1 and stride == 0 for size, stride in zip(t.shape, t.stride(), strict=True)
        )
    else:
        internal = t.numel() > 1 and torch._debug_has_internal_overlap(t) == 1
    if internal:
        raise RuntimeError(
            f"opforge::batch_norm: {name} has overlapping elements (strides {list(t.stride())}); "
            "it is updated in place and needs one address per element"
        )
    if not isinstance(other, torch.Tensor):
        return
    if traced and _base_of(t) is _base_of(other):
        raise RuntimeError(
            "opforge::batch_norm: running_var and running_mean are views of one tensor, which "
            "torch.compile cannot tell apart from overlapping ones: give each its own tensor"
        )
    if not traced and _share_memory(t, other):
        raise RuntimeError("opforge::batch_norm: running_var and running_mean overlap in memory")


def _base_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage ``t`` views (``t`` itself when it is no view)."""
    return t if t._base is None else t._base


def _share_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges ``a`` and ``b`` span in one storage intersect."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = t.storage_offset() * t.element_size()
        extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return start, start + (extent + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def write_back(original, used, when) -> None:
    """Copies what the kernel updated in place (``used``, a copy ``float_channels`` made) back
    into the caller's tensor, rounding to its dtype, when the call updated it (``when``). An
    inference tensor is written under inference mode, where torch's own update of it goes
    (torch.compile cannot ask which a tensor is, and traces no inference tensors)."""
    if when and used is not original:
        inference = not _compiling() and original.is_inference()
        mode = torch.inference_mode() if inference else torch.no_grad()
        with mode:
            original.copy_(used)


def training_eps(eps, training):
    """batch_norm's eps, refused as torch refuses it: not above 0 while training (the batch
    variance of a constant channel is 0, and 1/sqrt(0) is inf)."""
    if training and isinstance(eps, (int, float)) and eps <= 0:
        raise ValueError(
            f"opforge.torch.batch_norm: eps must be positive during training, got {eps}"
        )
    return eps


def int_list(function: str, name: str, value) -> list:
    """An int-list argument checked as torch checks it (a tuple, list or torch.Size of ints;
    NumPy ints and 0-d integer tensors count, as torch takes anything with ``__index__``)."""
    if isinstance(value, (tuple, list)):
        if all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in value):
            return list(value)
        try:
            return [_index(v) for v in value]
        except TypeError:
            pass
    raise TypeError(
        f"opforge.torch.{function}: {name} must be a tuple of ints, got {type(value).__name__}"
    )


def _index(value) -> int:
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise TypeError("a bool is not an int here")
    return operator.index(value)


def like_output(x: torch.Tensor) -> torch.Tensor:
    """An output shaped like ``x``, laid out as the kernels allocate it (fake kernels).

    The same rule as ``Call::allocate_like`` in csrc/runtime.hpp: ``x``'s strides when they lay it
    out densely (a transposed or permuted view), else contiguous.
    """
    dims = sorted((s, n) for s, n in zip(x.stride(), x.shape, strict=True) if n != 1)
    expected = 1
    dense = all(n != 0 for n in x.shape)
    for stride, size in dims:
        if stride != expected:
            dense = False
            break
        expected *= size
    if dense:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
