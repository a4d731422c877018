"""opcheck on every op, gradients against torch's own ops, transforms (torch.func, forward mode,
double backward), torch.compile, and the errors — every test on each device present, so a GPU
build is tested on CPU tensors too."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.torch_adapter.compile_backend import COMPILE_BACKEND

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")
harness = pytest.importorskip("tests.torch_adapter.harness")

from torch.library import opcheck  # noqa: E402

from tests.conformance.runner import TABLE, all_cases, is_data, prepare  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def opcheck_cases():
    """Per op and dtype its first case, plus every non-contiguous case: all ops, all dtypes."""
    seen, chosen = set(), []
    for case in all_cases():
        key = (case.op, case.dtype)
        if (key not in seen and case.values == "normal") or case.layout in (
            "transposed",
            "strided",
        ):
            seen.add(key)
            chosen.append(case)
    return chosen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", opcheck_cases(), ids=lambda c: c.id)
def test_opcheck(case, device):
    p = prepare(case)
    args = []
    for arg in p.op.args:
        if not arg.is_tensor:
            args.append(p.scalars[arg.name])
        elif p.tensors[arg.name] is None:
            args.append(None)
        else:
            t = harness.tensor(
                p.tensors[arg.name],
                p.dtype(case, arg.name),
                case.layout if is_data(arg) else "contiguous",
                device,
            )
            if arg.name in p.op.differentiable and not arg.mutable:
                t.requires_grad_()
            args.append(t)
    opcheck(getattr(torch.ops.opforge, case.op).default, tuple(args))


def test_every_op_of_the_table_is_registered():
    for name in TABLE.ops:
        assert hasattr(torch.ops.opforge, name), name


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_torch(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, 5, generator=g).to(device)
    w, b = torch.rand(4, generator=g).to(device) + 0.5, torch.randn(4, generator=g).to(device)
    upstream = torch.randn(16, 4, 5, generator=g).to(device)

    def grads(softmax, batch_norm):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        y = batch_norm(*leaves)
        (softmax(y) * upstream).sum().backward()
        return [t.grad for t in leaves]

    ours = grads(
        lambda y: ot.softmax(y, 1),
        lambda x_, w_, b_: ot.batch_norm(x_, None, None, w_, b_, True, 0.1, 1e-5),
    )
    native = grads(
        lambda y: torch.softmax(y, 1),
        lambda x_, w_, b_: torch.nn.functional.batch_norm(x_, None, None, w_, b_, True, 0.1, 1e-5),
    )
    for mine, theirs in zip(ours, native, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_inference_batch_norm_gradient_matches_torch(device):
    x = torch.randn(6, 3, device=device, requires_grad=True)
    w = torch.rand(3, device=device, requires_grad=True)
    rm, rv = torch.randn(3, device=device), torch.rand(3, device=device) + 0.5
    ot.batch_norm(x, rm, rv, w, None, False, 0.1, 1e-5).pow(2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.batch_norm(x2, rm, rv, w2, None, False).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


# --- transforms: right, or an error naming opforge; never silent zeros ---


@pytest.mark.parametrize("device", DEVICES)
def test_func_grad_jvp_vmap_and_jacobians_match_torch(device):
    x = torch.randn(3, 5, device=device)
    t = torch.randn(3, 5, device=device)

    def both(fn):
        return fn(lambda v: ot.softmax(v, -1)), fn(lambda v: torch.softmax(v, -1))

    for ours, native in (
        both(lambda f: torch.func.grad(lambda v: (f(v) * t).sum())(x)),
        both(lambda f: torch.func.jvp(f, (x,), (t,))[1]),
        both(lambda f: torch.func.vmap(f)(x)),
        both(lambda f: torch.func.vmap(torch.func.grad(lambda r: (f(r) * r).sum()))(x)),
        both(lambda f: torch.func.jacrev(f)(x[0])),
        both(lambda f: torch.func.jacfwd(f)(x[0])),
    ):
        torch.testing.assert_close(ours, native, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_mul_under_every_transform_matches_torch(device):
    # mul's backward calls mul: its gradient is differentiable, through torch.func too.
    x = torch.randn(3, device=device)
    y = torch.randn(3, device=device)

    def both(transform):
        return transform(lambda a: (ot.mul(a, y) * ot.mul(a, a)).sum()), transform(
            lambda a: (torch.mul(a, y) * torch.mul(a, a)).sum()
        )

    for ours, native in (
        both(lambda f: torch.func.grad(f)(x)),
        both(lambda f: torch.func.vmap(torch.func.grad(f))(torch.stack([x, y]))),
        both(lambda f: torch.func.grad(lambda v: torch.func.grad(f)(v).sum())(x)),
        both(lambda f: torch.func.hessian(f)(x)),
        both(lambda f: torch.func.jacrev(torch.func.jacrev(f))(x)),
    ):
        torch.testing.assert_close(ours, native, rtol=1e-5, atol=1e-6)


def _empty_batch_calls(device: str) -> dict:
    """Per op: ours, torch's, and the shape of an input with a batch dim of size 0 (batch_norm
    is not here: torch's refuses an empty batch under vmap)."""
    ones = torch.ones(2, 3, device=device)
    F = torch.nn.functional
    return {
        "softmax": (lambda v: ot.softmax(v, 0), lambda v: torch.softmax(v, 0), (0, 3)),
        "add": (lambda v: ot.add(v, 2.0), lambda v: torch.add(v, 2.0), (0, 3)),
        "mul": (lambda v: ot.mul(v, ones), lambda v: torch.mul(v, ones), (0, 3)),
        "gelu": (lambda v: ot.gelu(v), F.gelu, (0, 3)),
        "layer_norm": (lambda v: ot.layer_norm(v, (3,)), lambda v: F.layer_norm(v, (3,)), (0, 3)),
        "argmax": (lambda v: ot.argmax(v), lambda v: torch.argmax(v), (0, 2, 3)),
        "argmax dim": (
            lambda v: ot.argmax(v, 1, keepdim=True),
            lambda v: torch.argmax(v, 1, keepdim=True),
            (0, 2, 3),
        ),
        "the op itself": (
            lambda v: torch.ops.opforge.softmax(v, 1),
            lambda v: torch.softmax(v, 1),
            (0, 2, 3),
        ),
        "a backward op": (
            lambda v: torch.ops.opforge.gelu_backward(v, v, "none"),
            lambda v: torch.ops.aten.gelu_backward(v, v),
            (0, 3),
        ),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_empty_batch_calls("cpu")))
def test_vmap_over_an_empty_batch_gives_what_torch_gives(name, device):
    ours, native, shape = _empty_batch_calls(device)[name]
    x = torch.empty(shape, device=device)
    got, expected = torch.func.vmap(ours)(x), torch.func.vmap(native)(x)
    assert (got.shape, got.dtype, got.device) == (expected.shape, expected.dtype, expected.device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["softmax", "add", "mul", "gelu", "layer_norm"])
def test_backward_through_vmap_over_an_empty_batch_gives_what_torch_gives(name, device):
    # The empty outputs were not connected to autograd: backward raised "does not require grad".
    ours, native, shape = _empty_batch_calls(device)[name]
    weight = torch.randn(shape[1:], device=device, requires_grad=True)
    grads = []
    for fn in (ours, native):
        x = torch.empty(shape, device=device, requires_grad=True)
        torch.func.vmap(lambda v, fn=fn: fn(v) * weight)(x).sum().backward()
        grads.append((x.grad, weight.grad))
        weight.grad = None
    for got, expected in zip(*grads, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["argmax", "argmax dim", "the op itself", "a backward op"])
def test_vmap_of_an_op_without_autograd_matches_torch_without_the_fallback(name, device, capfd):
    # Once torch's batching fallback ran these, warning of "a performance drop" on every call.
    ours, native, shape = _empty_batch_calls(device)[name]
    x = torch.randn((4, *shape[1:]), device=device)
    torch.testing.assert_close(torch.func.vmap(ours)(x), torch.func.vmap(native)(x))
    assert "BatchedFallback" not in capfd.readouterr().err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "fn",
    [
        lambda t: ot.mul(t, t),
        lambda t: ot.add(t * t, t),
        lambda t: ot.gelu(t),
        lambda t: ot.softmax(t, 0),
    ],
    ids=["mul", "add", "gelu", "softmax"],
)
def test_nested_forward_mode_is_refused_and_hessian_is_not(fn, device):
    # torch.func does not differentiate a Function's jvp rule at an outer forward level: the
    # second derivative came back as zeros (jacfwd(jacfwd(mul)) gave 0 for 2).
    x = torch.randn(4, device=device, dtype=torch.float64).float()
    with pytest.raises(RuntimeError, match=r"^opforge::\w+: nested forward-mode AD"):
        torch.func.jacfwd(torch.func.jacfwd(fn))(x)
    with pytest.raises(RuntimeError, match=r"^opforge::\w+: nested forward-mode AD"):
        one = torch.ones_like(x)
        torch.func.jvp(lambda p: torch.func.jvp(fn, (p,), (one,))[1], (x,), (one,))
    ours = torch.func.hessian(lambda t: ot.mul(t, t).sum())(x)
    torch.testing.assert_close(ours, 2 * torch.eye(4, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("training", [False, True])
def test_running_statistics_that_require_grad_are_refused_before_anything_runs(training, device):
    # torch refuses them; opforge gave zero gradients (torch.func.grad) or None (backward).
    x = torch.randn(4, 3, device=device)
    rv = torch.rand(3, device=device) + 0.5
    rm = torch.zeros(3, device=device, requires_grad=True)
    message = r"^opforge::batch_norm: running_mean is not differentiable \(the op updates it in"
    with pytest.raises(RuntimeError, match=message):
        ot.batch_norm(x, rm, rv, training=training)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.opforge.batch_norm(x, None, None, rm, rv, training, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match=message):
        torch.func.grad(lambda m: ot.batch_norm(x, m, rv, training=training).sum())(rm.detach())
    assert rm.detach().eq(0).all() and rv.gt(0.5).all()  # nothing was updated
    with torch.no_grad():
        ot.batch_norm(x, rm, rv, training=training)  # no gradient asked: taken


@pytest.mark.parametrize("device", DEVICES)
def test_running_statistics_updated_in_place_need_memory_of_their_own(device):
    x = torch.randn(4, 3, device=device)
    expanded = torch.zeros(1, device=device).expand(3)
    with pytest.raises(
        RuntimeError, match=r"running_mean has overlapping elements \(strides \[0\]\)"
    ):
        ot.batch_norm(x, expanded, torch.ones(3, device=device), training=True)
    shared = torch.ones(3, device=device)
    with pytest.raises(RuntimeError, match="running_mean is updated in place and overlaps weight"):
        ot.batch_norm(x, shared, torch.ones(3, device=device), shared, training=True)
    assert shared.eq(1).all()
    buffer = torch.ones(6, device=device)  # interleaved: the spans meet, no element shared
    with pytest.raises(RuntimeError, match="running_mean is updated in place and overlaps weight"):
        ot.batch_norm(x, buffer[0::2], torch.ones(3, device=device), buffer[0:3], training=True)
    assert buffer.eq(1).all()
    # Inference updates nothing: a running_mean inside x or beside the weight is only read.
    rv = torch.ones(3, device=device)
    torch.testing.assert_close(
        ot.batch_norm(x, x[0], rv, training=False),
        torch.nn.functional.batch_norm(x, x[0], rv, training=False),
    )
    # The same tensor as weight and running_mean is read twice.
    torch.testing.assert_close(
        ot.batch_norm(x, shared, torch.ones(3, device=device), shared, training=False),
        torch.nn.functional.batch_norm(x, shared, torch.ones(3, device=device), shared),
    )


def test_torch_compile_takes_a_dim_that_varies_between_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(3, 4)
    softmax = torch.compile(
        lambda t, d: ot.softmax(t, d), fullgraph=True, dynamic=True, backend=COMPILE_BACKEND
    )
    argmax = torch.compile(
        lambda t, d: ot.argmax(t, d), fullgraph=True, dynamic=True, backend=COMPILE_BACKEND
    )
    for dim in (1, 0, -1):
        torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))
        assert torch.equal(argmax(x, dim), torch.argmax(x, dim))


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_over_the_weight_alone_updates_running_stats_once_as_torch(device):
    # x unbatched: every element's statistics are the same, and torch updates them once.
    x = torch.randn(6, 3, device=device)
    weights, biases = torch.randn(4, 3, device=device), torch.randn(4, 3, device=device)
    ours_stats = [torch.zeros(3, device=device), torch.ones(3, device=device)]
    torch_stats = [torch.zeros(3, device=device), torch.ones(3, device=device)]
    ours = torch.func.vmap(lambda w, b: ot.batch_norm(x, *ours_stats, w, b, training=True))
    native = torch.func.vmap(
        lambda w, b: torch.nn.functional.batch_norm(x, *torch_stats, w, b, training=True)
    )
    torch.testing.assert_close(ours(weights, biases), native(weights, biases))
    torch.testing.assert_close(ours_stats, torch_stats)
    assert not torch.equal(ours_stats[0], torch.zeros(3, device=device))  # updated, once
    # torch updates them even over an empty batch of weights.
    empty = torch.empty(0, 3, device=device)
    ours(empty, empty)
    native(empty, empty)
    torch.testing.assert_close(ours_stats, torch_stats)


@pytest.mark.parametrize("device", DEVICES)
def test_vmap_refuses_running_stats_it_would_update_once_per_element(device):
    # torch refuses this too; a loop would fold every element into one running_mean.
    x = torch.randn(2, 4, 3, device=device)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    with pytest.raises(RuntimeError) as info:
        torch.func.vmap(lambda v: ot.batch_norm(v, rm, rv, training=True))(x)
    assert str(info.value) == (
        "opforge::batch_norm: under vmap it would update running_mean and running_var once per "
        "batch element: they are not batched while x is (batch them too, or pass None)"
    )
    assert rm.eq(0).all() and rv.eq(1).all()  # nothing changed
    # One of the two batched: refused before either is written.
    rm2 = torch.zeros(2, 3, device=device)
    with pytest.raises(RuntimeError, match="it would update running_var once per batch element"):
        torch.func.vmap(lambda v, m: ot.batch_norm(v, m, rv, training=True))(x, rm2)
    assert rm2.eq(0).all() and rv.eq(1).all()
    # Nested vmap in inference, the statistics batched at the outer level only: as torch.
    xs = torch.randn(2, 3, 4, 5, device=device)
    means, vars_ = torch.randn(2, 5, device=device), torch.rand(2, 5, device=device) + 0.5

    def nested(bn):
        return torch.func.vmap(
            lambda xb, m, s: torch.func.vmap(lambda xi: bn(xi, m, s, training=False))(xb)
        )(xs, means, vars_)

    torch.testing.assert_close(nested(ot.batch_norm), nested(torch.nn.functional.batch_norm))
    # Read only (inference), or batched with the input: as torch.
    for training, stats in ((False, (rm, rv)), (True, (rm.expand(2, 3) + 0, rv.expand(2, 3) + 0))):
        dims = (0, None, None) if stats[0].dim() == 1 else (0, 0, 0)
        copies = tuple(s.clone() for s in stats)
        ours = torch.func.vmap(
            lambda v, m, s, t=training: ot.batch_norm(v, m, s, training=t), in_dims=dims
        )(x, *stats)
        native = torch.func.vmap(
            lambda v, m, s, t=training: torch.nn.functional.batch_norm(v, m, s, training=t),
            in_dims=dims,
        )(x, *copies)
        torch.testing.assert_close(ours, native)
        for mine, theirs in zip(stats, copies, strict=True):
            torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_add_is_linear(device):
    a, b = torch.randn(4, device=device), torch.randn(4, device=device)
    _, tangent = torch.func.jvp(
        lambda u, v: ot.add(u, v, alpha=2.0), (a, b), (torch.ones_like(a), torch.ones_like(b))
    )
    torch.testing.assert_close(tangent, torch.full_like(a, 3.0))


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_without_a_rule_raises_naming_the_op(device):
    x = torch.randn(6, 3, device=device)
    with pytest.raises(RuntimeError, match="opforge::batch_norm: forward-mode AD"):
        torch.func.jvp(lambda v: ot.batch_norm(v, None, None, training=True), (x,), (x,))
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level(), pytest.raises(RuntimeError, match="opforge::batch_norm: forward-mode"):
        ot.batch_norm(fwad.make_dual(x, x), None, None, training=True)


@pytest.mark.parametrize("device", DEVICES)
def test_functionalize_runs_the_op_alone_and_refuses_it_with_gradients_or_vmap(device):
    # torch has no functionalisation rule for an autograd.Function: every op with a backward
    # failed with torch's "NYI: Functionalize rule for custom_function_call".
    from torch.func import functionalize, grad, vmap

    x = torch.randn(3, 4, device=device)
    same = torch.testing.assert_close
    same(functionalize(lambda a: ot.softmax(a, 0))(x), torch.softmax(x, 0))
    same(
        functionalize(lambda a: ot.layer_norm(a, (4,)))(x),
        torch.nn.functional.layer_norm(x, (4,)),
    )
    y = x.clone().requires_grad_()
    (functionalize(lambda a: ot.gelu(a))(y) * x).sum().backward()
    z = x.clone().requires_grad_()
    (torch.nn.functional.gelu(z) * x).sum().backward()
    same(y.grad, z.grad)
    message = r"^opforge::(softmax|gelu): torch\.func\.functionalize is supported only around"
    for transformed in (
        lambda: grad(functionalize(lambda a: ot.gelu(a).sum()))(x),
        lambda: functionalize(grad(lambda a: ot.gelu(a).sum()))(x),
        lambda: vmap(functionalize(lambda a: ot.softmax(a, 0)))(x),
    ):
        with pytest.raises(RuntimeError, match=message):
            transformed()


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_raises_naming_the_op(device):
    x = torch.randn(3, 5, device=device, requires_grad=True)
    (gx,) = torch.autograd.grad((ot.softmax(x, -1) * x.detach()).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="opforge::softmax_backward has no derivative"):
        gx.sum().backward()
    # hessian is forward mode over reverse mode: the backward op has no forward-mode rule.
    with pytest.raises(RuntimeError, match="opforge::softmax_backward: forward-mode AD"):
        torch.func.hessian(lambda v: ot.softmax(v, -1).pow(2).sum())(x.detach()[0])
    y = torch.randn(6, 3, device=device, requires_grad=True)
    (gy,) = torch.autograd.grad(
        ot.batch_norm(y, None, None, training=True).pow(2).sum(), y, create_graph=True
    )
    with pytest.raises(RuntimeError, match="opforge::batch_norm_backward has no derivative"):
        torch.autograd.grad(gy.sum(), y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("gelu_backward", lambda v: ot.gelu(v)),
        ("softmax_backward", lambda v: ot.softmax(v, -1)),
        ("rms_norm_backward", lambda v: ot.rms_norm(v, [v.shape[-1]])),
        ("layer_norm_backward", lambda v: ot.layer_norm(v, [v.shape[-1]])),
        ("batch_norm_backward", lambda v: ot.batch_norm(v, None, None, training=True)),
    ],
)
def test_nested_func_grad_raises_naming_the_op(device, name, fn):
    # torch.func.grad of torch.func.grad differentiates the backward op: an error, not zeros.
    x = torch.randn(4, 3, device=device)
    w = torch.randn(4, 3, device=device)

    def first(v):
        return torch.func.grad(lambda u: (fn(u) * w).sum())(v).pow(2).sum()

    with pytest.raises(RuntimeError, match=f"opforge::{name} has no derivative"):
        torch.func.grad(first)(x)


def test_add_double_backward_is_exact():
    a = torch.randn(4, requires_grad=True)
    (ga,) = torch.autograd.grad(ot.add(a, a, alpha=2.0).pow(2).sum(), a, create_graph=True)
    (gga,) = torch.autograd.grad(ga.sum(), a)
    torch.testing.assert_close(gga, torch.full((4,), 18.0))


# --- torch.compile ---


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 6)
        self.weight = torch.nn.Parameter(torch.ones(6))
        self.bias = torch.nn.Parameter(torch.zeros(6))
        self.register_buffer("running_mean", torch.zeros(6))
        self.register_buffer("running_var", torch.ones(6))

    def forward(self, x):
        h = self.linear(x)
        h = ot.batch_norm(
            h, self.running_mean, self.running_var, self.weight, self.bias, self.training, 0.1, 1e-5
        )
        h = ot.add(h, h, alpha=0.5)
        p = ot.softmax(h, -1)
        return p, ot.argmax(p, -1)


@pytest.mark.slow
def test_torch_compile_traces_numbers_and_mixed_dtypes(tmp_path, monkeypatch):
    # Type promotion is worked out in code Dynamo traces (it cannot trace torch.result_type).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x, h = torch.randn(5), torch.randn(5).half()
    for fn in (
        lambda a, b: ot.add(a, 3.0),
        lambda a, b: ot.mul(2, b),
        lambda a, b: ot.add(b, a, alpha=0.5),
        lambda a, b: ot.mul(b, 1e-8),
    ):
        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x, h), fn(x, h))


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda t: ot.add(t, t, alpha=torch.tensor(2.0)), "add: alpha must be a Python float"),
        (lambda t: ot.add(t, t, alpha=np.float32(2.5)), "add: alpha must be a Python float"),
        (lambda t: ot.softmax(t, torch.tensor(1)), "softmax: dim must be a Python int"),
        (lambda t: ot.argmax(t, np.int64(1)), "argmax: dim must be a Python int"),
        (
            lambda t: ot.layer_norm(t, [4], eps=torch.tensor(0.1)),
            "layer_norm: eps must be a Python float",
        ),
    ],
    ids=["alpha-tensor", "alpha-numpy", "softmax-dim-tensor", "argmax-dim-numpy", "eps-tensor"],
)
def test_torch_compile_refuses_a_number_given_as_a_tensor_or_numpy_naming_it(call, said):
    """Traced, such a number is a value of the graph, and opforge's ops take theirs when it is
    traced: refused naming opforge, the op and the argument (in Dynamo's report); without
    fullgraph Dynamo resumes after the refusal, and the op itself refuses the tensor, named.
    Eagerly the call is taken."""
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=f"opforge.torch.{said} under torch.compile"):
        torch.compile(call, fullgraph=True, backend="aot_eager")(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"opforge(::|\.torch\.)\w+"):
        torch.compile(call, backend="aot_eager")(x)
    assert call(x).shape[0] == 3


@pytest.mark.slow
def test_torch_compile_traces_a_model_without_graph_breaks(tmp_path, monkeypatch):
    # A compile cache of its own: cached graphs do not know that an op's Python autograd changed.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = Tiny()
    x = torch.randn(16, 8)
    eager_p, eager_i = model(x)
    compiled = torch.compile(model, fullgraph=True, backend=COMPILE_BACKEND)
    before = model.running_mean.clone()
    p, i = compiled(x)
    torch.testing.assert_close(p, eager_p, rtol=1e-5, atol=1e-6)
    assert torch.equal(i, eager_i)
    assert not torch.equal(model.running_mean, before), "the compiled graph keeps the update"
    p.sum().backward()
    assert model.weight.grad is not None and model.linear.weight.grad is not None


# --- errors: one line naming the op and the problem, on every device, never a crash ---

ERRORS = [
    (
        lambda d: ot.add(torch.ones(3, 4, device=d), torch.ones(4, 3, device=d)),
        "opforge::add: shapes do not broadcast: a is [3, 4] but b is [4, 3]",
        RuntimeError,
    ),
    (
        lambda d: torch.ops.opforge.add(
            torch.ones(3, device=d), torch.ones(3, device=d).half(), 1.0
        ),
        "opforge::add: dtype mismatch: a is float32 but b is float16",
        RuntimeError,
    ),
    (
        lambda d: ot.softmax(torch.ones(3, 4, device=d), 5),
        "opforge::softmax: dim 5 is out of range for x of shape [3, 4] (valid: -2 to 1)",
        IndexError,
    ),
    (
        lambda d: ot.softmax(torch.ones(3, dtype=torch.long, device=d), 0),
        "opforge::softmax: x has dtype int64 (supported: float32, float16, bfloat16)",
        NotImplementedError,
    ),
    (
        lambda d: ot.softmax(torch.ones(3, dtype=torch.float64, device=d), 0),
        "opforge::softmax: x has dtype float64 (supported: float32, float16, bfloat16)",
        NotImplementedError,
    ),
    (
        lambda d: ot.argmax(torch.ones(3, 4, device=d), 2, False),
        "opforge::argmax: dim 2 is out of range for x of shape [3, 4] (valid: -2 to 1)",
        IndexError,
    ),
    (
        lambda d: ot.argmax(torch.ones(3, 0, device=d), 1),
        "opforge::argmax: cannot reduce x of shape [3, 0] over dim 1, which has size 0",
        IndexError,
    ),
    # Refused as torch refuses it, though the result would be empty.
    (
        lambda d: ot.argmax(torch.ones(0, 0, device=d), 0),
        "opforge::argmax: cannot reduce x of shape [0, 0] over dim 0, which has size 0",
        IndexError,
    ),
    (
        lambda d: ot.argmax(torch.ones(3, 0, 0, device=d), 1, True),
        "opforge::argmax: cannot reduce x of shape [3, 0, 0] over dim 1, which has size 0",
        IndexError,
    ),
    (
        lambda d: ot.argmax(torch.ones(0, device=d)),
        "opforge::argmax: cannot reduce x of shape [0], which is empty",
        IndexError,
    ),
    (
        lambda d: ot.batch_norm(
            torch.ones(4, 3, device=d), None, None, torch.ones(4, device=d), training=True
        ),
        "opforge::batch_norm: weight must have shape [3] (one per channel of x), got [4]",
        RuntimeError,
    ),
    (
        lambda d: ot.batch_norm(
            torch.ones(4, 3, device=d), None, None, torch.ones(3, device=d).half(), training=True
        ),
        "opforge::batch_norm: weight must be float32, got float16",
        RuntimeError,
    ),
    (
        lambda d: ot.batch_norm(torch.ones(4, device=d), None, None, training=True),
        "opforge.torch.batch_norm: input must have a batch and a channel dim (N x C x ...), "
        "got shape [4]",
        RuntimeError,
    ),
    (
        lambda d: ot.layer_norm(
            torch.ones(2, 3, device=d), (3,), torch.ones(3, device=d, dtype=torch.float16)
        ),
        "opforge::layer_norm: weight must be float32, got float16",
        RuntimeError,
    ),
    (
        lambda d: ot.layer_norm(
            torch.ones(2, 3, device=d).half(), (3,), torch.ones(3, device=d).bfloat16()
        ),
        "opforge::layer_norm: weight must be float32 or float16, got bfloat16",
        RuntimeError,
    ),
    (
        lambda d: ot.batch_norm(torch.ones(4, 3, device=d), None, None, training=False),
        "opforge::batch_norm: running_mean is required when training is false",
        RuntimeError,
    ),
    (
        lambda d: ot.batch_norm(
            torch.ones(4, 3, device=d), torch.zeros(3, device=d), None, training=True
        ),
        "opforge::batch_norm: give running_mean and running_var together, or none of them",
        ValueError,
    ),
    (
        lambda d: ot.batch_norm(torch.ones(1, 3, device=d), None, None, training=True),
        "opforge::batch_norm: needs at least 2 values per channel, got x of shape [1, 3]",
        ValueError,
    ),
    (
        lambda d: ot.batch_norm(
            torch.ones(4, 3, device=d),
            torch.zeros(3, device=d),
            torch.ones(3, device=d),
            training=False,
            eps=-1.0,
        ),
        "opforge::batch_norm: eps must be at least 0",
        ValueError,
    ),
    (
        lambda d: ot.batch_norm(
            torch.ones(4, 3, device=d), None, None, training=True, momentum=float("nan")
        ),
        "opforge::batch_norm: momentum must be finite, got nan",
        RuntimeError,
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("call", "message", "error"), ERRORS, ids=[m.split(": ", 1)[1][:40] for _, m, _ in ERRORS]
)
def test_errors_name_the_op_and_the_problem(call, message, error, device):
    # The exception is torch's own for the problem (tests/torch_adapter/test_exception_types.py
    # compares them with torch's calls).
    with pytest.raises(error) as info:
        call(device)
    assert type(info.value) is error
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("call", "message", "error"), ERRORS, ids=[m.split(": ", 1)[1][:40] for _, m, _ in ERRORS]
)
def test_fake_kernels_refuse_what_the_kernels_refuse(call, message, error):
    # Meta tensors reach the fake kernels (as torch.compile's fake tensors and vmap over an
    # empty batch do): the same checks, the same words, the same exception.
    with pytest.raises(error) as real:
        call("cpu")
    with pytest.raises(error) as fake:
        call("meta")
    assert message in str(fake.value)
    assert str(fake.value) == str(real.value)
    assert type(fake.value) is type(real.value) is error


def test_fake_tensor_mode_refuses_an_argument_the_kernel_refuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.ones(3, 4))
        with pytest.raises(IndexError, match=r"opforge::softmax: dim 2 is out of range"):
            ot.softmax(x, 2)
        with pytest.raises(
            RuntimeError, match=r"opforge::layer_norm: Given normalized_shape=\[3\]"
        ):
            ot.layer_norm(x, (3,))
        assert ot.softmax(x, 1).shape == (3, 4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "call",
    [
        lambda v: ot.softmax(v, 5),
        lambda v: ot.layer_norm(v, (4,)),
        lambda v: ot.rms_norm(v, (3,), torch.ones(2, device=v.device)),
        lambda v: ot.gelu(v, approximate="fast"),
        lambda v: ot.add(v, torch.ones(4, 3, device=v.device)),
    ],
    ids=["dim", "normalized_shape", "weight", "approximate", "broadcast"],
)
def test_vmap_over_an_empty_batch_refuses_what_any_batch_refuses(call, device):
    errors = []
    for batch in (2, 0):
        with pytest.raises((RuntimeError, IndexError)) as info:
            torch.func.vmap(call)(torch.ones(batch, 2, 3, device=device))
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]
    assert errors[1][1].startswith("opforge::")


ARGUMENT_ERRORS = [
    (
        lambda x: ot.softmax(x, None),
        TypeError,
        "opforge::softmax: dim must be an int, got NoneType",
    ),
    (
        lambda x: ot.softmax(x, 1.0),
        TypeError,
        "opforge.torch.softmax: dim must be an int, got float 1.0",
    ),
    (
        lambda x: ot.softmax(x, 2**64),
        ValueError,
        "opforge::softmax: dim is out of range for a 64-bit int, got 18446744073709551616",
    ),
    (
        lambda x: ot.argmax(x, (0, 1)),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got tuple (0, 1)",
    ),
    (
        lambda x: ot.gelu(x, approximate=None),
        TypeError,
        "opforge::gelu: approximate must be a string, got NoneType",
    ),
    (
        lambda x: ot.batch_norm(x, None, None, training=True, momentum=None),
        TypeError,
        "opforge::batch_norm: momentum must be a number, got NoneType",
    ),
    # A bool is an int to Python: torch's parser refuses it where an int or a bool is due, and
    # so must the helpers, or softmax(x, True) runs over dim 1.
    (
        lambda x: ot.softmax(x, True),
        TypeError,
        "opforge.torch.softmax: dim must be an int, got bool True",
    ),
    (
        lambda x: ot.argmax(x, dim=False),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got bool False",
    ),
    (
        lambda x: ot.argmax(x, 1, keepdim=1),
        TypeError,
        "opforge.torch.argmax: keepdim must be a bool, got int 1",
    ),
    (
        lambda x: ot.batch_norm(x, None, None, training=1),
        TypeError,
        "opforge.torch.batch_norm: training must be a bool, got int 1",
    ),
    # torch takes a bool or complex alpha as a number and refuses it in the kernel.
    (
        lambda x: ot.add(x, x, alpha=True),
        RuntimeError,
        "opforge.torch.add: a bool alpha is only supported for bool results, got True",
    ),
    (
        lambda x: ot.add(x, x, alpha=1j),
        RuntimeError,
        "opforge.torch.add: alpha must not be a complex number for real tensors, got 1j",
    ),
    (
        lambda x: ot.argmax(x, 2**63),
        ValueError,
        "opforge::argmax: dim is out of range for a 64-bit int, got 9223372036854775808",
    ),
    # NumPy bools and tensors: torch's parser refuses them where an int or a bool goes, the
    # dispatcher would convert them (tensor(0.7) as dim 0, np.int64(1) as keepdim=True).
    (
        lambda x: ot.softmax(x, np.True_),
        TypeError,
        "opforge.torch.softmax: dim must be an int, got bool",
    ),
    (
        lambda x: ot.argmax(x, torch.tensor(0.7)),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got Tensor tensor(0.7000)",
    ),
    (
        lambda x: ot.argmax(x, 1, keepdim=np.int64(1)),
        TypeError,
        "opforge.torch.argmax: keepdim must be a bool, got int64",
    ),
    (
        lambda x: ot.batch_norm(x, None, None, training=1.0),
        TypeError,
        "opforge.torch.batch_norm: training must be a bool, got float 1.0",
    ),
    # A dtype, a layout or a complex number, which the dispatcher would take as a number.
    (
        lambda x: ot.softmax(x, torch.uint8),
        TypeError,
        "opforge.torch.softmax: dim must be an int, got dtype torch.uint8",
    ),
    (
        lambda x: ot.argmax(x, torch.strided),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got layout torch.strided",
    ),
    (
        lambda x: ot.argmax(x, 1, 2 + 0j),
        TypeError,
        "opforge.torch.argmax: keepdim must be a bool, got complex (2+0j)",
    ),
    (
        lambda x: ot.batch_norm(x, None, None, training=2 + 0j),
        TypeError,
        "opforge.torch.batch_norm: training must be a bool, got complex (2+0j)",
    ),
    # torch's parser takes a 0-d tensor (needing no grad) where an int or a float goes, but
    # not a tensor with dims, a NumPy array or, for a float, one that requires grad (whose
    # gradient the op would drop).
    (
        lambda x: ot.softmax(x, torch.tensor([1])),
        TypeError,
        "opforge.torch.softmax: dim must be an int, got Tensor tensor([1])",
    ),
    (
        lambda x: ot.argmax(x, np.array(1)),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got ndarray",
    ),
    (
        lambda x: ot.argmax(x, np.ma.masked_array(1)),
        TypeError,
        "opforge.torch.argmax: dim must be an int or None, got MaskedArray",
    ),
    (
        lambda x: ot.add(x, x, alpha=torch.tensor([2.0])),
        TypeError,
        "opforge.torch.add: alpha must be a number (a 0-d tensor if it needs no grad), got Tensor",
    ),
    (
        lambda x: ot.add(x, x, alpha=torch.tensor(2.0, requires_grad=True)),
        TypeError,
        "opforge.torch.add: alpha must be a number (a 0-d tensor if it needs no grad), got Tensor",
    ),
    (
        lambda x: ot.layer_norm(x, x.shape[-1:], eps=torch.tensor(1e-3, requires_grad=True)),
        TypeError,
        "opforge.torch.layer_norm: eps must be a number (a 0-d tensor if it needs no grad)",
    ),
    (
        lambda x: ot.rms_norm(x, x.shape[-1:], eps=np.array(1e-3)),
        TypeError,
        "opforge.torch.rms_norm: eps must be a number (a 0-d tensor if it needs no grad)",
    ),
    (
        lambda x: ot.batch_norm(x, None, None, training=True, momentum=torch.tensor([0.1])),
        TypeError,
        "opforge.torch.batch_norm: momentum must be a number (a 0-d tensor if it needs no grad)",
    ),
    (
        lambda x: ot.mul(x, np.array(2.0)),
        TypeError,
        "opforge.torch.mul: operands are tensors or Python numbers, got ndarray",
    ),
    (
        lambda x: ot.add(x, 2 + 1j),
        NotImplementedError,
        "opforge.torch.add: the result dtype would be torch.complex64",
    ),
    (
        lambda x: ot.argmax(x, 1, None),
        TypeError,
        "opforge.torch.argmax: keepdim must be a bool, got NoneType None",
    ),
    (
        lambda x: ot.softmax(x, 1, dtype="float32"),
        TypeError,
        "opforge.torch.softmax: dtype must be a torch.dtype or None, got str 'float32'",
    ),
    # Not a tensor where one goes: the schema check's words, one line (an AttributeError on
    # requires_grad before).
    (
        lambda x: ot.softmax(x.tolist(), 0),
        TypeError,
        "opforge::softmax: x must be Tensor, got list",
    ),
    (
        lambda x: ot.layer_norm(x, [x.shape[-1]], [1.0] * x.shape[-1]),
        TypeError,
        "opforge::layer_norm: weight must be Tensor or None, got list",
    ),
    (
        lambda x: ot.add(x, x, alpha=torch.tensor(True)),
        RuntimeError,
        "opforge.torch.add: a bool alpha is only supported for bool results, got tensor(True)",
    ),
    # torch takes ints that fit 64 bits, signed or unsigned, and no others.
    (
        lambda x: ot.mul(x, 2**64),
        OverflowError,
        "opforge.torch.mul: an int operand 18446744073709551616 does not fit 64 bits",
    ),
    (
        lambda x: ot.add(x, -(10**5000)),
        OverflowError,
        "opforge.torch.add: an int operand of 16610 bits does not fit 64 bits",
    ),
    (
        lambda x: ot.add(x, x, alpha=2**64),
        OverflowError,
        "opforge.torch.add: alpha 18446744073709551616 does not fit 64 bits",
    ),
    # From NumPy, torch reads integers as int64: a uint64 past it is refused.
    (
        lambda x: ot.mul(np.uint64(2**63), x),
        TypeError,
        "opforge.torch.mul: an int operand numpy.uint64(9223372036854775808) is past 2**63 - 1",
    ),
    (
        lambda x: ot.add(x, x, alpha=np.uint64(2**64 - 1)),
        TypeError,
        "opforge.torch.add: alpha numpy.uint64(18446744073709551615) is past 2**63 - 1",
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("dtype", "alpha"),
    [
        (torch.float32, 1e39),
        (torch.float16, 70000.0),
        (torch.float16, 2**63),
        (torch.bfloat16, -1e39),
        (torch.float16, 65504.0),
        (torch.float32, float("inf")),
        (torch.float16, float("nan")),
    ],
)
def test_an_alpha_torch_cannot_convert_is_refused_as_torch_refuses_it(dtype, alpha, device):
    # torch converts alpha to the dtype on CPU and to float32 on CUDA, refusing an overflow.
    a = torch.ones(3, dtype=dtype, device=device)
    try:
        expected = torch.add(a, a, alpha=alpha)
    except RuntimeError as exc:
        assert "without overflow" in str(exc)
        with pytest.raises(RuntimeError, match=r"^opforge.torch.add: alpha \S+ does not fit"):
            ot.add(a, a, alpha=alpha)
    else:
        torch.testing.assert_close(ot.add(a, a, alpha=alpha), expected, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "value", [2**64 - 1, -(2**63), np.uint64(2**63 - 1), np.uint32(2**32 - 1), np.int64(-(2**63))]
)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_int_operands_that_fit_64_bits_match_torch(op, value, device):
    x = torch.linspace(-2, 2, 5, device=device)
    torch.testing.assert_close(getattr(ot, op)(x, value), getattr(torch, op)(x, value))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize(
    ("call", "error", "message"),
    ARGUMENT_ERRORS,
    ids=[m.split(": ", 1)[1][:30] for _, _, m in ARGUMENT_ERRORS],
)
def test_arguments_of_the_wrong_type_are_one_line_errors(
    call, error, message, device, requires_grad
):
    # torch's own schema matching would print a many-line message ending in a C++ declaration.
    x = torch.ones(4, 3, device=device, requires_grad=requires_grad)
    with pytest.raises(error) as info:
        call(x)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "dim",
    [np.int64(1), np.uint8(1), torch.tensor(1), torch.tensor(1, dtype=torch.uint8)],
    ids=["numpy int64", "numpy uint8", "0-d int64 tensor", "0-d uint8 tensor"],
)
@pytest.mark.parametrize("device", DEVICES)
def test_ints_torch_takes_as_dim(dim, device):
    x = torch.randn(3, 4, device=device)
    torch.testing.assert_close(ot.softmax(x, dim), torch.softmax(x, dim))
    assert torch.equal(ot.argmax(x, dim), torch.argmax(x, dim))


def test_an_object_with_index_is_no_dim_to_torch_nor_to_opforge():
    class Index:
        def __index__(self) -> int:
            return 1

    x = torch.randn(3, 4)
    with pytest.raises(TypeError):
        torch.softmax(x, Index())
    with pytest.raises(TypeError, match=r"^opforge.torch.softmax: dim must be an int, got Index"):
        ot.softmax(x, Index())


# --- out=: where torch's own call takes it, the helper takes out=None and refuses a tensor ---

_TORCH_FUNCTIONS = {fn.name: fn for op in TABLE.ops.values() for fn in op.functions["torch"]}
_TAKES_OUT = sorted(name for name, fn in _TORCH_FUNCTIONS.items() if fn.takes_out)


def _counterpart(name: str):
    """The torch call a helper mirrors, as its doc in the op table names it (as ``torch.x``)."""
    found = re.search(r"as ``(torch(?:\.\w+)+)``", _TORCH_FUNCTIONS[name].doc)
    assert found, f"the doc of the torch function {name} names no torch call (as ``torch.x``)"
    call = torch
    for part in found.group(1).split(".")[1:]:
        call = getattr(call, part)
    return call


def _takes_out(call) -> bool:
    """Whether a torch call takes ``out=``: a Python function by its signature, a builtin (whose
    binding takes ``out=`` where ATen has an out overload) by its schemas."""
    try:
        return "out" in inspect.signature(call).parameters
    except ValueError:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{call.__name__}")
        return any(a.name == "out" and a.kwarg_only for s in schemas for a in s.arguments)


def _out_call(name: str, device: str, requires_grad: bool = False) -> tuple:
    """Arguments for the helper ``name`` and its torch call, beside ``out=``."""
    x = torch.randn(4, 3, device=device, requires_grad=requires_grad)
    return {
        "add": ((x, x), {"alpha": 2}),
        "mul": ((x, 1.5), {}),
        "softmax": ((x, 1), {}),
        "argmax": ((x, 1), {}),
        "gelu": ((x,), {"approximate": "tanh"}),
    }[name]


@pytest.mark.parametrize("name", sorted(_TORCH_FUNCTIONS))
def test_the_table_says_out_where_torchs_own_call_takes_it(name):
    # takes_out in kernels/ops.yaml is the one record of it: checked against the installed torch.
    assert _TORCH_FUNCTIONS[name].takes_out == _takes_out(_counterpart(name))
    params = inspect.signature(getattr(ot, name)).parameters
    if _TORCH_FUNCTIONS[name].takes_out:
        assert params["out"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["out"].default is None
    else:
        assert "out" not in params


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", _TAKES_OUT)
def test_out_is_refused_naming_the_helper_and_the_fix(name, requires_grad, device):
    args, kwargs = _out_call(name, device, requires_grad)
    expected = _counterpart(name)(*args, **kwargs).detach()
    # torch takes it (so code written for torch passes it; without grad, which torch's out=
    # refuses), where the helper said only "unexpected keyword argument 'out'".
    plain = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    out = torch.empty_like(expected)
    assert _counterpart(name)(*plain, **kwargs, out=out) is out
    out = torch.full_like(expected, 7)
    with pytest.raises(TypeError) as info:
        getattr(ot, name)(*args, **kwargs, out=out)
    assert str(info.value) == (
        f"opforge.torch.{name}: out= is not supported, the result is always a new tensor: "
        f"assign it, or copy it in with out.copy_(opforge.torch.{name}(...))"
    )
    assert (out == 7).all(), "the refused out= tensor was written"
    # The fix the message gives leaves in out what torch's out= would.
    out.copy_(getattr(ot, name)(*args, **kwargs))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", _TAKES_OUT)
def test_out_none_is_taken_as_torch_takes_it(name, device):
    args, kwargs = _out_call(name, device)
    ours = getattr(ot, name)(*args, **kwargs, out=None)
    native = _counterpart(name)(*args, **kwargs, out=None)
    assert ours.dtype == native.dtype and ours.shape == native.shape
    torch.testing.assert_close(ours, native)


def test_out_is_keyword_only_as_in_torch():
    x = torch.ones(2, 3)
    with pytest.raises(TypeError, match="positional argument"):
        torch.mul(x, x, x)
    with pytest.raises(TypeError, match="positional argument"):
        ot.mul(x, x, x)


@pytest.mark.gpu
def test_cpu_cuda_mix_is_refused():
    with pytest.raises(RuntimeError, match="opforge::add: device mismatch: b is on cuda:0"):
        ot.add(torch.ones(3), torch.ones(3, device="cuda"))


def _helper_calls(weight: torch.Tensor) -> dict:
    """Each helper on one input, with torch's own call beside it."""
    F = torch.nn.functional
    return {
        "add": (lambda v: ot.add(v, v, alpha=2), lambda v: torch.add(v, v, alpha=2)),
        "mul": (lambda v: ot.mul(v, 1.5), lambda v: torch.mul(v, 1.5)),
        "softmax": (lambda v: ot.softmax(v, 1), lambda v: torch.softmax(v, 1)),
        "argmax": (lambda v: ot.argmax(v, 1), lambda v: torch.argmax(v, 1)),
        "gelu": (ot.gelu, F.gelu),
        "layer_norm": (
            lambda v: ot.layer_norm(v, (3,), weight),
            lambda v: F.layer_norm(v, (3,), weight),
        ),
        "rms_norm": (
            lambda v: ot.rms_norm(v, (3,), weight),
            lambda v: F.rms_norm(v, (3,), weight),
        ),
        "batch_norm": (
            lambda v: ot.batch_norm(v, None, None, weight, training=True),
            lambda v: F.batch_norm(v, None, None, weight, training=True),
        ),
    }


# The helpers with a gradient (argmax has none), and those with forward-mode rules (the norms
# refuse forward mode, naming the op).
_DIFFERENTIABLE = [n for n in _helper_calls(torch.ones(3)) if n != "argmax"]
_FORWARD_MODE = ["add", "mul", "softmax", "gelu"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", _DIFFERENTIABLE)
def test_gradients_batched_by_the_older_vmap_match_torch(name, device):
    # torch.autograd.grad(is_grads_batched=True), gradcheck's check_batched_grad (OpInfo's
    # gradient tests) and vectorised jacobians run the backward under torch's older vmap, whose
    # batched tensors the helpers once handed to the kernels as plain ones (an opaque C++ error).
    # Seeded, and float32 tolerances for a sum's rounding: the norms' gradients over rows of 3
    # sum terms in another order than torch's (layer_norm's once came out 2e-5 apart).
    torch.manual_seed(0)
    close = {"rtol": 1e-5, "atol": 5e-5}
    weight = torch.rand(3, device=device) + 0.5
    ours, native = _helper_calls(weight)[name]
    x = torch.randn(4, 3, device=device, requires_grad=True)
    grads = torch.randn(5, 4, 3, device=device)
    torch.testing.assert_close(
        torch.autograd.grad(ours(x), x, grads, is_grads_batched=True)[0],
        torch.autograd.grad(native(x), x, grads, is_grads_batched=True)[0],
        **close,
    )
    jacobian = torch.autograd.functional.jacobian
    torch.testing.assert_close(
        jacobian(ours, x.detach(), vectorize=True), jacobian(native, x.detach()), **close
    )
    x64 = torch.randn(4, 3, device=device, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda v: ours(v.float()).double(),
        (x64,),
        eps=1e-3,
        atol=1e-2,
        rtol=1e-2,
        check_batched_grad=True,
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", _DIFFERENTIABLE)
def test_a_vjp_function_called_after_its_transform_matches_torch(name, device):
    # torch.func.vjp's function runs once the transform's level has ended, on saved tensors
    # that still wrap that level (mul's operands), which the helpers must not take as plain.
    weight = torch.rand(3, device=device) + 0.5
    ours, native = _helper_calls(weight)[name]
    x, g = torch.randn(4, 3, device=device), torch.randn(4, 3, device=device)
    (got,) = torch.func.vjp(ours, x)[1](g)
    (want,) = torch.func.vjp(native, x)[1](g)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", _FORWARD_MODE)
def test_vectorised_forward_mode_jacobians_match_torch(name, device):
    # Forward mode under the older vmap: a batched tangent, where unpack_dual has no batching
    # rule (mul once raised torch's "Batching rule not implemented for aten::_unpack_dual").
    ours, native = _helper_calls(torch.ones(3, device=device))[name]
    x = torch.randn(4, 3, device=device)
    jacobian = torch.autograd.functional.jacobian
    torch.testing.assert_close(
        jacobian(ours, x, vectorize=True, strategy="forward-mode"), jacobian(native, x)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_helper_calls(torch.ones(3))))
def test_a_lazily_negated_view_is_read_with_its_sign(name, device):
    # x.conj().imag carries a negative bit the helpers' direct kernel call once skipped.
    def negated(*shape):
        return torch.randn(*shape, dtype=torch.complex64, device=device).conj().imag

    weight = negated(3)
    ours, native = _helper_calls(weight)[name]
    x = negated(4, 3)
    assert x.is_neg()
    torch.testing.assert_close(ours(x), native(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_running_statistics_with_a_negative_bit_are_refused_before_anything_runs(device):
    x = torch.randn(4, 3, device=device)
    running_mean = torch.randn(3, dtype=torch.complex64, device=device).conj().imag
    before = running_mean.clone()
    message = r"^opforge::batch_norm: running_mean is updated in place and is a lazily negated"
    for call in (
        lambda: ot.batch_norm(x, running_mean, torch.ones(3, device=device), training=True),
        lambda: torch.ops.opforge.batch_norm(
            x, None, None, running_mean, torch.ones(3, device=device), True, 0.1, 1e-5
        ),
    ):
        with pytest.raises(RuntimeError, match=message):
            call()
    assert torch.equal(running_mean, before)


@pytest.mark.parametrize("device", DEVICES)
def test_running_statistics_with_a_negative_bit_are_read_in_inference(device):
    # In inference the statistics are only read: torch normalises with them, and so does opforge.
    x = torch.randn(4, 3, device=device)
    running_mean = torch.randn(3, dtype=torch.complex64, device=device).conj().imag
    positive = torch.rand(3, device=device) + 0.5
    running_var = torch.complex(torch.zeros_like(positive), -positive).conj().imag
    assert running_mean.is_neg() and running_var.is_neg()
    expected = torch.nn.functional.batch_norm(x, running_mean, running_var, training=False)
    before = running_mean.clone()
    torch.testing.assert_close(
        ot.batch_norm(x, running_mean, running_var, training=False), expected
    )
    direct = torch.ops.opforge.batch_norm(
        x, None, None, running_mean, running_var, False, 0.1, 1e-5
    )
    torch.testing.assert_close(direct[0], expected)
    assert torch.equal(running_mean, before) and running_mean.is_neg()


_NO_KERNEL_DTYPES = [
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.complex32,
    torch.bits16,
]


@pytest.mark.parametrize("dtype", _NO_KERNEL_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(_helper_calls(torch.ones(3))))
def test_a_dtype_the_stable_abi_cannot_name_is_refused_as_not_implemented(name, dtype):
    # DLPack has no code for float8 or complex32, and the stable ABI no conversion for bits16:
    # the refusal still names the op, the argument and the dtype, as torch's NotImplementedError.
    if dtype == torch.bits16:
        x = torch.zeros(4, 3, dtype=torch.int16).view(dtype)
    else:
        x = torch.zeros(4, 3).to(dtype)
    ours, _ = _helper_calls(torch.ones(3))[name]
    shown = str(dtype).removeprefix("torch.")
    with pytest.raises(NotImplementedError, match=rf"^opforge\S*: .*\b{shown}\b"):
        ours(x)


class _Traced(torch.nn.Module):
    """One helper call, its weight a parameter (a traced function may not close over a tensor
    that requires grad) and, for batch_norm, running statistics as buffers."""

    def __init__(self, name: str, weight: torch.Tensor, call=None):
        super().__init__()
        self.name, self.call = name, call
        self.weight = torch.nn.Parameter(weight, requires_grad=weight.requires_grad)
        self.register_buffer("mean", torch.zeros(2, device=weight.device))
        self.register_buffer("var", torch.ones(2, device=weight.device))

    def forward(self, x):
        if self.call is not None:
            return self.call(x, self.mean, self.var, self.weight, None, True, 0.5, 1e-5)
        return _helper_calls(self.weight)[self.name][0](x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_helper_calls(torch.ones(3))))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_jit_trace_records_the_op_not_its_result(name, device, requires_grad, tmp_path):
    # Without grad the trace once baked the result in; with it, it recorded the
    # autograd.Function beside the op (which then ran twice, and could not be saved).
    weight = (torch.rand(3, device=device) + 0.5).requires_grad_(requires_grad)
    traced = torch.jit.trace(
        _Traced(name, weight), (torch.randn(4, 3, device=device),), check_trace=False
    )
    kinds = [node.kind() for node in traced.graph.nodes()]
    assert f"opforge::{name}" in kinds and "prim::PythonOp" not in kinds
    torch.jit.save(traced, str(tmp_path / "traced.pt"))
    loaded = torch.jit.load(str(tmp_path / "traced.pt"))
    y = torch.randn(4, 3, device=device)
    native = _helper_calls(weight)[name][1]
    # torch's default float32 tolerances: layer_norm's values near 0 differ from torch's by
    # about 1e-6 absolute, as any two float32 reductions in other orders.
    torch.testing.assert_close(loaded(y), native(y))


@pytest.mark.parametrize("device", DEVICES)
def test_a_traced_batch_norm_updates_running_statistics_once_a_call(device):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    stats = []
    for fn in (ot.batch_norm, torch.nn.functional.batch_norm):
        module = _Traced("batch_norm", torch.ones(2, device=device, requires_grad=True), fn)
        traced = torch.jit.trace(module, (x,), check_trace=False)
        traced.mean.zero_(), traced.var.fill_(1.0)
        traced(x).sum().backward()
        stats.append((traced.mean.clone(), traced.var.clone(), traced.weight.grad))
    for ours, native in zip(*stats, strict=True):
        torch.testing.assert_close(ours, native)


def _other_layouts(device: str) -> dict:
    x = torch.randn(2, 3, device=device)
    found = {
        "sparse_coo": (x.to_sparse(), ".to_dense()"),
        "sparse_csr": (x.to_sparse_csr(), ".to_dense()"),
    }
    rows = [torch.randn(3, device=device), torch.randn(3, device=device)]
    found["nested"] = (torch.nested.nested_tensor(rows), ".to_padded_tensor(0) or .unbind()")
    # A jagged nested tensor is a subclass: refused by its own dispatch, or by the dispatcher's.
    found["jagged"] = (
        torch.nested.nested_tensor(rows, layout=torch.jagged),
        ("pass plain tensors", ".to_padded_tensor(0) or .unbind()"),
    )
    if device == "cpu":
        found["mkldnn"] = (x.to_mkldnn(), ".to_dense()")
        found["quantized"] = (torch.quantize_per_tensor(x, 0.1, 0, torch.qint8), ".dequantize()")
    return found


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_helper_calls(torch.ones(3))))
def test_tensors_of_other_layouts_are_refused_in_one_line_with_the_conversion(name, device):
    # An mkldnn tensor reports strides (1, 0): the direct kernel call read garbage from it.
    ours, _ = _helper_calls(torch.ones(3, device=device))[name]
    for tensor, conversion in _other_layouts(device).values():
        with pytest.raises(NotImplementedError) as info:
            ours(tensor)
        message = str(info.value)
        assert message.startswith(f"opforge::{name}: takes dense (strided) CPU and CUDA tensors")
        assert message.endswith(conversion) and "\n" not in message


@pytest.mark.parametrize("device", DEVICES)
def test_none_where_a_tensor_goes_is_a_one_line_error(device):
    x = torch.ones(2, 3, device=device)
    calls = [
        (lambda: ot.softmax(None, 1), "opforge::softmax: x must be a Tensor, got None"),
        (lambda: ot.layer_norm(None, (3,)), "opforge::layer_norm: x must be a Tensor, got None"),
        (
            lambda: torch.ops.opforge.softmax_backward(x, None, 1),
            "opforge::softmax_backward: dy must be a Tensor, got None",
        ),
        (
            lambda: ot.softmax([1.0], 0, dtype=torch.float32),
            "opforge::softmax: x must be Tensor, got list",
        ),
    ]
    for call, message in calls:
        with pytest.raises((TypeError, RuntimeError)) as info:
            call()
        assert str(info.value).startswith(message) and "\n" not in str(info.value)


_OUT_OF_MEMORY = """
import resource, torch, opforge.torch as ot
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
n = 2**27
x = torch.zeros(1).expand(1, n)  # a stride-0 view: the CPU kernel keeps per-element offsets
limit = vm_bytes() + (1 << 30)  # room for the output (512 MiB), none for 2 GiB of offsets
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
for call in (lambda: ot.layer_norm(x, (n,)), lambda: ot.rms_norm(x, (n,))):
    try:
        call()
    except RuntimeError as exc:
        print(str(exc))
"""


def test_a_kernel_out_of_host_memory_raises_instead_of_aborting():
    # std::bad_alloc crossed the C ABI and aborted the process (SIGABRT, no Python error).
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    for line, op in zip(lines, ("layer_norm", "rms_norm"), strict=True):
        assert line.startswith(f"opforge::{op}: out of host memory for the kernel's working")


@pytest.mark.parametrize("device", DEVICES)
def test_mul_keeps_only_the_operands_a_wanted_gradient_reads(device):
    # torch saves `other` for `self`'s gradient only: changing `self` in place afterwards is no
    # error when `other` needs no gradient, and the gradient is torch's.
    for call in (lambda a: ot.mul(a, 2.0), lambda a: ot.mul(2.0, a), torch.mul):
        x = torch.randn(3, device=device, requires_grad=True)
        a = x * 1
        y = call(a, 2.0) if call is torch.mul else call(a)
        a.add_(1)
        y.sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_mul_refuses_a_read_operand_changed_in_place_as_torch_does(device):
    for call in (ot.mul, torch.mul):
        x = torch.randn(3, device=device, requires_grad=True)
        w = torch.randn(3, device=device, requires_grad=True)
        a = x * 1
        y = call(a, w)
        a.add_(1)  # w's gradient reads a
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
