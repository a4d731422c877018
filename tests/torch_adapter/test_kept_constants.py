"""Numbers beside CUDA tensors become 0-d CUDA tensors the helpers keep between calls (making
one launches a fill kernel each call): the answers are those of fresh ones in every setting where
a kept tensor could go wrong — signed zeros and NaN, side streams, CUDA graph capture, inference
mode, torch.compile and fake tensors, which must not see a kept real tensor."""

from __future__ import annotations

import struct

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")
from opforge.torch import _runtime  # noqa: E402

gpu = pytest.mark.gpu


@gpu
def test_a_number_beside_a_cuda_tensor_is_kept_and_reused():
    x = torch.randn(1000, device="cuda")
    # Kept from the second call on: a number that changes every call never syncs a stream.
    first, second, third = (_runtime._scalar(0.4375, torch.float32, x.device, x) for _ in "abc")
    assert first.data_ptr() != second.data_ptr() == third.data_ptr()
    assert first.item() == second.item() == 0.4375
    assert torch.equal(ot.add(x, 0.4375), torch.add(x, 0.4375))
    assert torch.equal(ot.mul(x, 0.4375), torch.mul(x, 0.4375))


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_signed_zeros_nan_and_numbers_past_the_range_keep_their_own_constants(dtype):
    x = torch.tensor([1.0, -2.0, 0.0, float("inf")], device="cuda", dtype=dtype)
    for number in (0.0, -0.0, float("nan"), float("nan"), 1e39, -1e39, 3, True, 0.1):
        for helper, theirs in ((ot.add, torch.add), (ot.mul, torch.mul)):
            ours = helper(x, number)
            expected = theirs(x, number)
            torch.testing.assert_close(ours, expected, equal_nan=True, rtol=0, atol=0)
            assert torch.equal(torch.signbit(ours), torch.signbit(expected)), (helper, number)


@gpu
def test_a_constant_made_on_a_side_stream_is_filled_for_every_stream():
    x = torch.randn(1 << 20, device="cuda")
    side, other = torch.cuda.Stream(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    other.wait_stream(torch.cuda.current_stream())
    # Keep the side stream busy so that an unordered fill would still be pending; the second
    # call there makes the kept constant.
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        first = ot.add(x, 0.71875)
        kept = ot.add(x, 0.71875)
    with torch.cuda.stream(other):
        second = ot.add(x, 0.71875)
    torch.cuda.synchronize()
    for result in (first, kept, second):
        assert torch.equal(result, x + 0.71875)


@gpu
def test_a_number_first_seen_while_a_cuda_graph_is_captured():
    x = torch.randn(4096, device="cuda")
    number = 0.59375  # used nowhere else in this process
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        captured = ot.mul(x, number)
    torch.cuda.current_stream().wait_stream(side)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, torch.mul(x, number))
    # Not kept from inside the capture: outside it, the number is made and filled.
    assert torch.equal(ot.mul(x, number), torch.mul(x, number))
    x.copy_(torch.randn(4096, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, torch.mul(x, number))


@gpu
def test_a_constant_first_made_in_inference_mode_serves_a_backward():
    number = 0.84375
    with torch.inference_mode():
        for _ in range(2):  # kept on the second call
            ot.mul(torch.randn(8, device="cuda"), number)
    x = torch.randn(8, device="cuda", requires_grad=True)
    y = ot.mul(x.half(), number)
    (grad,) = torch.autograd.grad(y.float().sum(), x)
    torch.testing.assert_close(grad, torch.full_like(x, number), rtol=1e-3, atol=1e-3)


@gpu
def test_a_constant_is_not_kept_where_synchronising_would_warn_or_raise():
    # Keeping one synchronises its stream once; torch's sync debug mode forbids that.
    x = torch.randn(16, device="cuda")
    number = 0.90625
    torch.cuda.set_sync_debug_mode("error")
    try:
        ours = [ot.mul(x, number) for _ in range(2)]  # kept from the second call, elsewhere
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for result in ours:  # torch.equal synchronises: compared once the mode is off
        assert torch.equal(result, torch.mul(x, number))
    key = (float, struct.pack("<d", number), torch.float32, x.device)
    assert key not in _runtime._KEPT


@gpu
def test_compiled_and_fake_calls_make_their_own():
    x = torch.randn(64, device="cuda")
    compiled = torch.compile(lambda t: ot.add(t, 0.65625), fullgraph=True)
    assert torch.equal(compiled(x), x + 0.65625)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        out = ot.add(fake, 0.65625)
    assert out.shape == x.shape and out.device == x.device


def test_only_plain_eager_calls_keep_constants():
    """What decides, checked where no GPU is needed: a fake tensor or mode, torch.compile's
    tracing and jit.trace each make their own constant."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(3)
    assert _runtime._plain_eager(x) and _runtime._plain_eager(None)
    with FakeTensorMode() as mode:
        assert not _runtime._plain_eager(mode.from_tensor(x))
    seen = []

    def record(t):
        seen.append(_runtime._plain_eager(t))
        return t + 1

    torch.compile(record, backend="eager", fullgraph=True)(x)
    torch.jit.trace(record, (x,), check_trace=False)
    with torch.autograd.forward_ad.dual_level():
        record(x)
    assert seen == [False, False, True], seen
