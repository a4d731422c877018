"""The helpers behave as the torch calls they replace: defaults, broadcasting, Python numbers,
type promotion, ``dim=None``, ``dtype=``, in-place running statistics — on every device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def same(ours: torch.Tensor, native: torch.Tensor, **tolerance) -> None:
    assert ours.dtype == native.dtype and ours.shape == native.shape
    torch.testing.assert_close(ours, native, **tolerance)


@pytest.mark.parametrize("device", DEVICES)
def test_argmax_without_dim_flattens(device):
    x = torch.tensor([[1.0, 5.0], [7.0, 2.0]], device=device)
    same(ot.argmax(x), torch.argmax(x))
    assert int(ot.argmax(x)) == 2
    same(ot.argmax(x, keepdim=True), torch.argmax(x, keepdim=True))
    y = torch.randn(3, 4, 5, device=device).transpose(0, 2)
    for dim in (None, 0, 1, -1):
        for keepdim in (False, True):
            same(ot.argmax(y, dim, keepdim), torch.argmax(y, dim, keepdim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((10, 1, 5), (1, 10, 5)), ((4, 3), (3,)), ((3,), (4, 3)), ((2, 3), ())]
)
def test_add_broadcasts(device, a_shape, b_shape):
    a, b = torch.randn(a_shape, device=device), torch.randn(b_shape, device=device)
    same(ot.add(a, b), torch.add(a, b))
    same(ot.add(a, b, alpha=-1.5), torch.add(a, b, alpha=-1.5))


@pytest.mark.parametrize("device", DEVICES)
def test_add_takes_python_numbers_and_promotes(device):
    x = torch.randn(4, device=device)
    same(ot.add(x, 2.0), torch.add(x, 2.0))
    same(ot.add(x, 2), torch.add(x, 2))
    same(ot.add(2.0, x), torch.add(2.0, x))
    h = x.half()
    same(ot.add(h, 2.5), torch.add(h, 2.5))
    same(ot.add(h, x), torch.add(h, x))  # float16 + float32 -> float32
    ints = torch.arange(4, device=device)
    same(ot.add(ints, 0.5), torch.add(ints, 0.5))  # int64 + float -> float32


@pytest.mark.parametrize("device", DEVICES)
def test_add_refuses_results_opforge_does_not_compute(device):
    ints = torch.arange(4, device=device)
    with pytest.raises(RuntimeError, match="opforge::add: a has dtype int64"):
        ot.add(ints, ints)
    with pytest.raises(
        TypeError, match=r"opforge.torch.add: the result dtype would be torch.int64"
    ):
        ot.add(ints, 2)
    with pytest.raises(
        TypeError, match=r"opforge.torch.add: the result dtype would be torch.float64"
    ):
        ot.add(torch.ones(3, device=device, dtype=torch.float64), 1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_add_gradients_sum_over_broadcast_dims(device):
    a = torch.randn(4, 3, device=device, requires_grad=True)
    b = torch.randn(3, device=device, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    ot.add(a, b, alpha=2.0).pow(2).sum().backward()
    torch.add(a2, b2, alpha=2.0).pow(2).sum().backward()
    same(a.grad, a2.grad)
    same(b.grad, b2.grad)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_dtype_casts_first(device):
    x = torch.randn(4, 7, device=device, dtype=torch.float16, requires_grad=True)
    ours = ot.softmax(x, -1, dtype=torch.float32)
    native = torch.softmax(x, -1, dtype=torch.float32)
    same(ours, native)
    (ours * 2).sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float16


def test_softmax_needs_dim_as_torch_softmax():
    with pytest.raises(TypeError):
        ot.softmax(torch.randn(3))  # torch.softmax(x) raises too


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_matches_functional_batch_norm(device):
    x = torch.randn(8, 3, 5, device=device)
    w, b = torch.rand(3, device=device) + 0.5, torch.randn(3, device=device)
    for training in (True, False):
        rm, rv = torch.randn(3, device=device), torch.rand(3, device=device) + 0.5
        rm2, rv2 = rm.clone(), rv.clone()
        ours = ot.batch_norm(x, rm, rv, w, b, training, 0.3, 1e-3)
        native = torch.nn.functional.batch_norm(x, rm2, rv2, w, b, training, 0.3, 1e-3)
        same(ours, native, rtol=1e-5, atol=1e-5)
        same(rm, rm2, rtol=1e-5, atol=1e-6)  # updated in place, PyTorch's momentum
        same(rv, rv2, rtol=1e-5, atol=1e-6)
    same(
        ot.batch_norm(x, None, None, training=True),
        torch.nn.functional.batch_norm(x, None, None, training=True),
        rtol=1e-5,
        atol=1e-5,
    )
