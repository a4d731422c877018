"""Forward mode (``mindspore.ops.jvp``) and gradients of gradients through opforge.mindspore:
the values of MindSpore's own ops where the op table gives a forward-mode rule, a one-line
refusal naming the function where it does not."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
ofm = pytest.importorskip("opforge.mindspore")

from mindspore import Tensor, ops  # noqa: E402
from mindspore import dtype as mstype  # noqa: E402

from opforge.mindspore import _ops  # noqa: E402


def f32(*shape, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return Tensor((rng.standard_normal(shape) * scale).astype(np.float32))


def _ours_softmax(t):
    return ofm.softmax(t, 0)


def _native_softmax(t):
    return ops.softmax(t, 0)


def _ours_gelu(t):
    return ofm.gelu(t)


def _native_gelu(t):
    return ops.gelu(t)


def _ours_gelu_tanh(t):
    return ofm.gelu(t, approximate="tanh")


def _transforms(forward, x, v, w):
    """``ops.jvp`` of ``forward`` along v, and the gradient of <grad of <forward(x), w>, v> (a
    gradient of a gradient). No variable here is called ``fn``: with one, ops.jvp's own closure
    variable ``fn`` came back resolved to this helper in a full run of the suite."""

    # Losses reduce in float32: MindSpore's CPU ReduceSum has no bfloat16 kernel.
    def loss(t, weights):
        return (forward(t).astype(mstype.float32) * weights).sum()

    def projected(t, direction, weights):
        first = ops.grad(loss)(t, weights)
        return (first.astype(mstype.float32) * direction.astype(mstype.float32)).sum()

    return ops.jvp(forward, x, v)[1], ops.grad(projected)(x, v, w)


@pytest.mark.parametrize(
    ("ours", "native"),
    [(_ours_softmax, _native_softmax), (_ours_gelu, _native_gelu)],
    ids=["softmax", "gelu"],
)
def test_forward_mode_and_second_derivatives_match_mindspores(ours, native, mode):
    # ops.jvp differentiates the gradient once more: it raised in softmax_backward's bprop,
    # blaming a gradient of a gradient.
    x, v, w = f32(3, 5, scale=2.0), f32(3, 5, seed=1), f32(3, 5, seed=2)
    got = _transforms(ours, x, v, w)
    # MindSpore's own second derivative of softmax fails in PYNATIVE ("The pointer[input_tensor]
    # is null"): its values from GRAPH mode.
    ms.set_context(mode=ms.GRAPH_MODE)
    expected = _transforms(native, x, v, w)
    for o, n in zip(got, expected, strict=True):
        assert o.dtype == n.dtype == mstype.float32
        np.testing.assert_allclose(o.asnumpy(), n.asnumpy(), rtol=1e-5, atol=1e-6)


def _central(f, x: np.ndarray, v: np.ndarray, h: float = 1e-3) -> np.ndarray:
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


def test_gelu_tanh_forward_mode_and_second_derivative_match_central_differences(mode):
    # MindSpore's own gelu has no second derivative for the tanh approximation: its formula,
    # differentiated in float64.
    c, a = np.sqrt(2 / np.pi), 0.044715

    def gelu(t):
        return 0.5 * t * (1 + np.tanh(c * (t + a * t**3)))

    def slope(t):
        return _central(gelu, t, np.ones_like(t), 1e-5)

    x, v, w = f32(3, 5, scale=2.0), f32(3, 5, seed=1), f32(3, 5, seed=2)
    xs, vs, ws = (t.asnumpy().astype(np.float64) for t in (x, v, w))
    tangent, second = _transforms(_ours_gelu_tanh, x, v, w)
    np.testing.assert_allclose(tangent.asnumpy(), _central(gelu, xs, vs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        second.asnumpy(), _central(slope, xs, np.ones_like(xs)) * ws * vs, rtol=1e-3, atol=1e-4
    )


@pytest.mark.parametrize("dtype", [mstype.float16, mstype.bfloat16])
@pytest.mark.parametrize("ours", [_ours_softmax, _ours_gelu], ids=["softmax", "gelu"])
def test_forward_mode_keeps_two_byte_dtypes(ours, dtype):
    x, v, w = f32(3, 5), f32(3, 5, seed=1), f32(3, 5, seed=2)
    got = _transforms(ours, x.astype(dtype), v.astype(dtype), w)
    expected = _transforms(ours, x, v, w)
    for o, n in zip(got, expected, strict=True):
        assert o.dtype == dtype
        np.testing.assert_allclose(
            o.astype(mstype.float32).asnumpy(), n.asnumpy(), rtol=3e-2, atol=3e-2
        )


_REFUSED = {
    "layer_norm": "ofm.layer_norm(t, (5,))",
    "layer_norm_stats": "ofm.layer_norm_stats(t, gamma, beta)[0]",
    "rms_norm": "ofm.rms_norm(t, gamma)[0]",
    "batch_norm": "ofm.batch_norm(t, None, None, training=True)",
}


@pytest.mark.parametrize("transform", ["jvp", "second"])
@pytest.mark.parametrize("name", list(_REFUSED))
@pytest.mark.parametrize("graph", [False, True], ids=["pynative", "graph"])
def test_forward_mode_without_a_rule_is_refused_naming_the_function(
    name, transform, graph, tmp_path
):
    # A new process each: after a failed gradient MindSpore may raise it again from later calls.
    script = textwrap.dedent(
        f"""
        import numpy as np, mindspore as ms
        from mindspore import Tensor, ops
        import opforge.mindspore as ofm
        ms.set_device("CPU")
        ms.set_context(mode=ms.GRAPH_MODE if {graph} else ms.PYNATIVE_MODE)
        x = Tensor(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
        gamma, beta = Tensor(np.ones(5, np.float32)), Tensor(np.zeros(5, np.float32))
        def f(t):
            return {_REFUSED[name]}
        def loss(t):
            return (f(t) * x).sum()
        first = ops.grad(loss)
        def projected(t):
            return (first(t) * x).sum()
        try:
            ops.jvp(f, x, x) if "{transform}" == "jvp" else ops.grad(projected)(x)
        except RuntimeError as e:
            print("REFUSED", str(e).splitlines()[0])
        """
    )
    # A file: MindSpore compiles functions from their source.
    path = tmp_path / "refused.py"
    path.write_text(script)
    run = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    op = "layer_norm" if name.startswith("layer_norm") else name
    functions = "layer_norm or layer_norm_stats" if op == "layer_norm" else op
    expected = (
        f"REFUSED opforge.mindspore.{op}: forward mode (ops.jvp) and gradients of gradients are "
        f"not supported through opforge.mindspore.{functions} ({op}_backward has no derivative)"
    )
    assert expected in run.stdout.splitlines(), run.stdout + run.stderr[-2000:]


def test_every_backward_op_of_a_forward_mode_rule_has_a_derivative():
    # ops.jvp differentiates the backward op: one the generator refuses to differentiate refuses
    # forward mode where the table gives a rule.
    from opforge.kernels import gen_mindspore
    from opforge.mindspore import _second_order
    from tests.conformance.runner import TABLE

    needed = {
        op.backward.op
        for op in TABLE.ops.values()
        if op.jvp is not None and op.backward is not None and op.backward.op is not None
    }
    assert needed == set(gen_mindspore.SECOND_ORDER)
    for name in gen_mindspore.SECOND_ORDER:
        assert callable(getattr(_second_order, name))
        assert "no_derivative" not in inspect.getsource(getattr(_ops, f"_{name}_bprop"))
