"""opcheck, gradients against torch's own ops, torch.compile, and the error messages."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")

from torch.library import opcheck  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def samples(device: str):
    """(op, args) pairs covering every op, plain and non-contiguous, float32 and half types."""
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype=torch.float32, grad=False):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype).requires_grad_(grad)

    ops = torch.ops.opforge
    yield ops.add.default, (r(3, 4, grad=True), r(3, 4, grad=True)), {"alpha": 0.5}
    yield ops.add.default, (r(4, 3).t(), r(3, 4, dtype=torch.float32)), {}
    yield ops.add.default, (r(5, dtype=torch.bfloat16), r(5, dtype=torch.bfloat16)), {}
    yield ops.softmax.default, (r(3, 7, grad=True), 1), {}
    yield ops.softmax.default, (r(4, 5, 6, grad=True), 0), {}
    yield ops.softmax.default, (r(8, 16, dtype=torch.float16), -1), {}
    yield ops.softmax_backward.default, (torch.softmax(r(3, 7), 1), r(3, 7), 1), {}
    yield ops.argmax.default, (r(3, 7), 1, False), {}
    yield ops.argmax.default, (r(3, 7).t(), 0, True), {}
    for shape in ((8, 3), (4, 3, 5), (2, 3, 4, 5)):
        yield (
            ops.batch_norm.default,
            (
                r(*shape, grad=True),
                r(3, grad=True),
                r(3, grad=True),
                torch.zeros(3, device=device),
                torch.ones(3, device=device),
                True,
                0.1,
                1e-5,
            ),
            {},
        )
    yield (
        ops.batch_norm.default,
        (
            r(6, 3, grad=True),
            None,
            None,
            torch.zeros(3, device=device),
            torch.ones(3, device=device),
            False,
            0.1,
            1e-5,
        ),
        {},
    )
    x = r(8, 3)
    _, sm, si = ops.batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    yield ops.batch_norm_backward.default, (r(8, 3), x, r(3), sm, si, 1e-5), {}


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_every_op(device):
    seen = set()
    for op, args, kwargs in samples(device):
        opcheck(op, args, kwargs)
        seen.add(op.name())
    assert seen == {
        f"opforge::{n}"
        for n in (
            "add",
            "softmax",
            "softmax_backward",
            "argmax",
            "batch_norm",
            "batch_norm_backward",
        )
    }


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
        lambda x_, w_, b_: ot.batch_norm(x_, w_, b_, None, None, True, 0.1, 1e-5)[0],
    )
    native = grads(
        lambda y: torch.softmax(y, 1),
        lambda x_, w_, b_: torch.nn.functional.batch_norm(x_, None, None, w_, b_, True, 0.1, 1e-5),
    )
    for mine, theirs in zip(ours, native, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_add_gradient_scales_b_by_alpha():
    a, b = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    ot.add(a, b, alpha=-2.5).sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(5))
    torch.testing.assert_close(b.grad, torch.full((5,), -2.5))


def test_inference_mode_batch_norm_gradient():
    x = torch.randn(6, 3, requires_grad=True)
    w = torch.rand(3, requires_grad=True)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    ot.batch_norm(x, w, None, rm, rv, False, 0.1, 1e-5)[0].pow(2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.batch_norm(x2, rm, rv, w2, None, False).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


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
            h, self.weight, self.bias, self.running_mean, self.running_var, self.training, 0.1, 1e-5
        )[0]
        h = ot.add(h, h, alpha=0.5)
        p = ot.softmax(h, -1)
        return p, ot.argmax(p, -1)


@pytest.mark.slow
def test_torch_compile_traces_a_model_without_graph_breaks():
    torch.manual_seed(0)
    model = Tiny()
    x = torch.randn(16, 8)
    eager_p, eager_i = model(x)
    # Inductor compiles C++ on the CPU; without a compiler (the runtime image) the same trace
    # (Dynamo, fake kernels, functionalisation) runs with the aot_eager backend.
    backend = "inductor" if shutil.which("c++") or shutil.which("g++") else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    before = model.running_mean.clone()
    p, i = compiled(x)
    torch.testing.assert_close(p, eager_p, rtol=1e-5, atol=1e-6)
    assert torch.equal(i, eager_i)
    assert not torch.equal(model.running_mean, before), (
        "the compiled graph keeps the in-place update"
    )
    p.sum().backward()
    assert model.weight.grad is not None and model.linear.weight.grad is not None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ot.add(torch.ones(3, 4), torch.ones(4, 3)),
            "opforge::add: shape mismatch: a is [3, 4] but b is [4, 3]",
        ),
        (
            lambda: ot.softmax(torch.ones(3, 4), 2),
            "opforge::softmax: dim 2 is out of range for a tensor of shape [3, 4] (valid: -2 to 1)",
        ),
        (
            lambda: ot.softmax(torch.ones(3, dtype=torch.long), 0),
            "opforge::softmax: x must be float32, float16 or bfloat16, got Long",
        ),
        (lambda: ot.argmax(torch.ones(3, 4), -3), "opforge::argmax: dim -3 is out of range"),
        (
            lambda: ot.batch_norm(torch.ones(4, 3), torch.ones(4), None, None, None, True),
            "opforge::batch_norm: weight must have shape [3] (one per channel of x [4, 3]), got [4]",
        ),
        (
            lambda: ot.batch_norm(torch.ones(4, 3), None, None, None, None, False),
            "running_mean and running_var are required when training=False",
        ),
        (
            lambda: ot.batch_norm(torch.ones(1, 3), None, None, None, None, True),
            "training needs more than one value per channel",
        ),
    ],
)
def test_errors_name_the_op_and_the_problem(call, message):
    with pytest.raises(RuntimeError) as info:
        call()
    assert message in str(info.value)


@pytest.mark.gpu
def test_cpu_cuda_mix_is_refused():
    with pytest.raises(RuntimeError, match="opforge::add: a is on cpu but b is on cuda:0"):
        ot.add(torch.ones(3), torch.ones(3, device="cuda"))
