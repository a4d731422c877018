"""The helpers refuse an argument with the exception torch's own call raises (IndexError for a
dim out of range, ValueError where torch checks a value, NotImplementedError for a dtype without
a kernel), so that ``except IndexError:`` around ``torch.softmax`` still works around
``opforge.torch.softmax`` — eagerly, on fake tensors and under torch.compile. The message stays
opforge's one line."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

F = torch.nn.functional
# The torch calls the helpers mirror, under the helpers' names.
TORCH = SimpleNamespace(
    softmax=torch.softmax,
    argmax=torch.argmax,
    gelu=F.gelu,
    layer_norm=F.layer_norm,
    rms_norm=F.rms_norm,
    batch_norm=F.batch_norm,
    add=torch.add,
)


class Ones:
    """Tensors of ones for a case, on ``device``; floating ones require grad if ``grad``."""

    def __init__(self, device: str = "cpu", grad: bool = False) -> None:
        self.device, self.grad = device, grad

    def __call__(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        t = torch.ones(shape, device=self.device, dtype=dtype)
        return t.requires_grad_() if self.grad and t.is_floating_point() else t


def _batch_norm(f, ones, x, mean=True, var=True, **kwargs):
    # Running statistics never require grad (the op updates them in place).
    stats = [torch.full((3,), v, device=ones.device) for v in (0.0, 1.0)]
    return f.batch_norm(x, stats[0] if mean else None, stats[1] if var else None, **kwargs)


LONG = torch.int64
# (name, the call on torch's functions or opforge's (f) with its inputs (ones), torch's
# exception).
# The RuntimeError cases check that a kind of problem is typed only where torch types it.
CASES = [
    ("softmax dim past the end", lambda f, ones: f.softmax(ones(2, 3), 5), IndexError),
    ("softmax dim before the start", lambda f, ones: f.softmax(ones(2, 3), -3), IndexError),
    ("softmax dim 1 of a 0-d tensor", lambda f, ones: f.softmax(ones(), 1), IndexError),
    (
        "softmax of int64",
        lambda f, ones: f.softmax(ones(2, 3, dtype=LONG), 0),
        NotImplementedError,
    ),
    (
        "softmax of bool",
        lambda f, ones: f.softmax(ones(2, 3, dtype=torch.bool), 0),
        NotImplementedError,
    ),
    ("argmax dim past the end", lambda f, ones: f.argmax(ones(2, 3), 7), IndexError),
    ("argmax dim before the start", lambda f, ones: f.argmax(ones(2, 3), -3), IndexError),
    ("argmax of an empty tensor", lambda f, ones: f.argmax(ones(0)), IndexError),
    ("argmax over an empty dim", lambda f, ones: f.argmax(ones(0, 3), 0), IndexError),
    (
        "argmax over an empty dim to an empty result",
        lambda f, ones: f.argmax(ones(0, 0), 0),
        IndexError,
    ),
    ("gelu of int64", lambda f, ones: f.gelu(ones(2, dtype=LONG)), NotImplementedError),
    (
        "gelu with an unknown approximate",
        lambda f, ones: f.gelu(ones(2), approximate="fast"),
        RuntimeError,
    ),
    (
        "layer_norm of int64",
        lambda f, ones: f.layer_norm(ones(2, 3, dtype=LONG), [3]),
        NotImplementedError,
    ),
    (
        "layer_norm normalized_shape longer than the input",
        lambda f, ones: f.layer_norm(ones(2, 3), [2, 2, 3]),
        RuntimeError,
    ),
    (
        "rms_norm of int64",
        lambda f, ones: f.rms_norm(ones(2, 3, dtype=LONG), [3]),
        NotImplementedError,
    ),
    (
        "rms_norm normalized_shape longer than the input",
        lambda f, ones: f.rms_norm(ones(2, 3), [2, 2, 3]),
        ValueError,
    ),
    (
        "rms_norm normalized_shape of other sizes",
        lambda f, ones: f.rms_norm(ones(2, 3), [4]),
        RuntimeError,
    ),
    (
        "batch_norm of int64",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3, dtype=LONG)),
        NotImplementedError,
    ),
    (
        "batch_norm training on one value per channel",
        lambda f, ones: _batch_norm(f, ones, ones(1, 3), training=True),
        ValueError,
    ),
    (
        "batch_norm training with running_mean alone",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3), var=False, training=True),
        ValueError,
    ),
    (
        "batch_norm training with running_var alone",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3), mean=False, training=True),
        ValueError,
    ),
    (
        "batch_norm inference with running_var alone",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3), mean=False),
        RuntimeError,
    ),
    (
        "batch_norm inference with a negative eps",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3), eps=-1.0),
        ValueError,
    ),
    (
        "batch_norm training with eps 0",
        lambda f, ones: _batch_norm(f, ones, ones(2, 3), training=True, eps=0.0),
        ValueError,
    ),
    (
        "add of shapes that do not broadcast",
        lambda f, ones: f.add(ones(2, 3), ones(4)),
        RuntimeError,
    ),
]
IDS = [name for name, *_ in CASES]
PARAMS = [case[1:] for case in CASES]


def _raised(call) -> Exception:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("call", "error"), PARAMS, ids=IDS)
def test_helpers_raise_the_exception_torch_raises(call, error, device):
    theirs = _raised(lambda: call(TORCH, Ones(device)))
    ours = _raised(lambda: call(ot, Ones(device)))
    assert type(theirs) is error, f"torch {torch.__version__} raises {theirs!r}"
    assert type(ours) is error, repr(ours)
    assert str(ours).startswith(("opforge::", "opforge.torch.")) and "\n" not in str(ours)
    # One error in the traceback: no "during handling of the above exception" before it.
    assert ours.__cause__ is None and (ours.__context__ is None or ours.__suppress_context__)


class _Passing(torch.overrides.TorchFunctionMode):
    """A mode that changes nothing: a helper under it goes through the dispatcher."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("call", "error"), PARAMS, ids=IDS)
def test_autograd_and_dispatcher_calls_raise_it_too(call, error):
    # Inputs that require grad take the op's autograd.Function; a torch-function mode the
    # dispatcher (the Autograd key's kernel, then the CPU one), not the CPU kernel directly.
    words = str(_raised(lambda: call(ot, Ones())))
    ours = _raised(lambda: call(ot, Ones(grad=True)))
    assert type(ours) is error and str(ours) == words
    with _Passing():
        ours = _raised(lambda: call(ot, Ones()))
    assert type(ours) is error and str(ours) == words


@pytest.mark.parametrize(("call", "error"), PARAMS, ids=IDS)
def test_fake_tensors_raise_what_real_ones_raise(call, error):
    words = str(_raised(lambda: call(ot, Ones())))
    with FakeTensorMode():
        ours = _raised(lambda: call(ot, Ones()))
    assert type(ours) is error and str(ours) == words


# Where torch under torch.compile raises otherwise than eagerly, opforge raises as eagerly:
# torch's meta kernels raise RuntimeError for argmax of an empty tensor and layer_norm of int64
# (its kernels IndexError and NotImplementedError); Dynamo runs F.batch_norm whole on fake
# tensors, wrapping its ValueError for eps, where it traces the helper's own check of eps.
TORCH_COMPILE_DIFFERS = {
    "argmax of an empty tensor",
    "layer_norm of int64",
    "batch_norm training with eps 0",
}


# torch 2.13's Dynamo passes an IndexError from a fake kernel on (torch/_dynamo/utils.py,
# get_fake_value); earlier ones wrap it in TorchRuntimeError.
_DYNAMO_WRAPS_INDEX_ERRORS = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13)


def _compiled(call):
    torch._dynamo.reset()
    return _raised(lambda: torch.compile(call, backend="eager")())


@pytest.mark.parametrize(("name", "call", "error"), CASES, ids=IDS)
def test_torch_compile_raises_what_it_raises_for_torch(name, call, error, caplog):
    # Dynamo passes an IndexError from a fake kernel on, runs eagerly (raising there) what a
    # NotImplementedError refuses, and wraps any other error of a fake kernel in
    # TorchRuntimeError: for opforge's ops as for torch's.
    caplog.set_level(logging.CRITICAL, logger="torch._subclasses.fake_tensor")
    ours = _compiled(lambda: call(ot, Ones()))
    if name in TORCH_COMPILE_DIFFERS:
        expected = error
    else:
        expected = type(_compiled(lambda: call(TORCH, Ones())))
    if expected is IndexError and _DYNAMO_WRAPS_INDEX_ERRORS:
        # Before torch 2.13, Dynamo wrapped every error of a fake kernel, an IndexError too,
        # where torch's own ops raise theirs before reaching one: the IndexError is named inside.
        expected = torch._dynamo.exc.TorchRuntimeError
        assert "got IndexError('opforge::" in str(ours), repr(ours)
    assert type(ours) is expected, repr(ours)
    assert "opforge" in str(ours)


def test_a_failed_call_keeps_its_error_unless_the_checks_name_the_same_problem():
    from opforge.torch._runtime import argument_error

    exc = RuntimeError("opforge::softmax: dim 5 is out of range for x of shape [2, 3]")

    def refusing(words):
        def checks(*args):
            raise IndexError(words)

        return checks

    typed = argument_error(exc, refusing(str(exc)), ())
    assert type(typed) is IndexError and str(typed) == str(exc)
    assert argument_error(exc, refusing("opforge::softmax: another problem"), ()) is exc
    assert argument_error(exc, lambda: None, ()) is exc
