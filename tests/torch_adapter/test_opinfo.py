"""PyTorch's own OpInfo samples (``op_db`` of the installed torch) through the helpers: each
sample gives torch's answer (or, where they differ beyond tolerance, an answer no further from
the float64 one than torch's) or an error naming opforge — never a worse answer.

The helpers mirror ``torch.add``, ``torch.mul``, ``torch.softmax``, ``torch.argmax`` and the
``torch.nn.functional`` norms and gelu; ``reference_inputs`` (broadcasting, Python numbers,
non-contiguous views, edge sizes) are compared in float32, float16 and bfloat16, and the counts
are printed for the record.
"""

from __future__ import annotations

import copy
import re

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("opforge.torch")
pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

# OpInfo name -> the helper mirroring it.
MIRRORS = {
    "add": "add",
    "mul": "mul",
    "softmax": "softmax",
    "argmax": "argmax",
    "nn.functional.layer_norm": "layer_norm",
    "nn.functional.rms_norm": "rms_norm",
    "nn.functional.gelu": "gelu",
    "nn.functional.batch_norm": "batch_norm",
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOLERANCE = {
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
# The refusals the README documents, as they read; any other refusal of an OpInfo sample is a
# case inside the contract that opforge fails to compute.
DOCUMENTED_REFUSALS = (
    r"has dtype float64 \(supported: ",  # a float64 input or result
    r"^opforge\.torch\.softmax: dtype=float64 is not supported",  # dtype=torch.float64
    r"^opforge.torch.batch_norm: input must have a batch and a channel dim",  # 0-d, 1-d input
)


def _float64(value):
    """``value`` with every floating tensor in it as a float64 copy."""
    if isinstance(value, torch.Tensor):
        return value.detach().double() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _float64(v) for k, v in value.items()}
    return value


def _no_further(ours, theirs, exact, dtype) -> None:
    """Each element of ours at most as far from ``exact`` (float64) as torch's, give or take the
    dtype's tolerance: torch's 2-byte kernels round intermediates differently between versions
    (torch 2.11's CPU batch_norm applies bfloat16 weight and bias in bfloat16, 2.13 in float32,
    as opforge), so where two answers differ, the closer one is not a wrong one."""
    if isinstance(theirs, (tuple, list)):
        for a, b, e in zip(ours, theirs, exact, strict=True):
            _no_further(a, b, e, dtype)
        return
    if not isinstance(theirs, torch.Tensor) or not theirs.is_floating_point():
        _close(ours, theirs, dtype)
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.shape, theirs.shape)
    rtol, atol = TOLERANCE.get(theirs.dtype, TOLERANCE[dtype])
    exact = exact.to(ours.device)
    ours_off = (ours.double() - exact).abs()
    theirs_off = (theirs.double() - exact).abs()
    worse = ours_off > theirs_off + atol + rtol * exact.abs()
    assert not worse.any(), (
        f"{int(worse.sum())} elements further from float64 than torch's, the worst "
        f"{float((ours_off - theirs_off).max())} off"
    )


def opinfos():
    return [
        pytest.param(o, id=f"{o.name}{'.' + o.variant_test_name if o.variant_test_name else ''}")
        for o in op_db
        if o.name in MIRRORS and hasattr(ot, MIRRORS[o.name])
    ]


def _close(ours, theirs, dtype) -> None:
    if isinstance(theirs, (tuple, list)):
        for a, b in zip(ours, theirs, strict=True):
            _close(a, b, dtype)
        return
    if not isinstance(theirs, torch.Tensor):
        assert ours == theirs
        return
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.shape, theirs.shape)
    rtol, atol = (
        TOLERANCE.get(theirs.dtype, TOLERANCE[dtype]) if theirs.is_floating_point() else (0, 0)
    )
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)


def sampled_on_devices():
    """(OpInfo, device) wherever the OpInfo takes a dtype opforge computes on that device
    (batch_norm's without_cudnn variant takes none on CPU)."""
    pairs = []
    for op in opinfos():
        for device in DEVICES:
            name, marks = (
                (device, ()) if isinstance(device, str) else (*device.values, device.marks)
            )
            if any(dtype in op.values[0].supported_dtypes(name) for dtype in DTYPES):
                pairs.append(pytest.param(op.values[0], name, marks=marks, id=f"{op.id}-{name}"))
    return pairs


@pytest.mark.slow
@pytest.mark.parametrize(("opinfo", "device"), sampled_on_devices())
def test_reference_inputs_give_torchs_answer_or_an_opforge_error(opinfo, device, capsys):
    helper = getattr(ot, MIRRORS[opinfo.name])
    matched = refused = 0
    for dtype in DTYPES:
        if dtype not in opinfo.supported_dtypes(device):
            continue
        for sample in opinfo.reference_inputs(device, dtype, requires_grad=False):
            args = (sample.input, *sample.args)
            theirs_args, theirs_kwargs = copy.deepcopy((args, sample.kwargs))
            exact_args, exact_kwargs = _float64(copy.deepcopy((args, sample.kwargs)))
            theirs = opinfo.op(*theirs_args, **theirs_kwargs)
            try:
                ours = helper(*args, **sample.kwargs)
            except (RuntimeError, TypeError, ValueError) as exc:
                assert any(re.search(p, str(exc)) for p in DOCUMENTED_REFUSALS), (
                    f"{sample}: a refusal the README does not document: {exc}"
                )
                refused += 1
                continue
            try:
                _close(ours, theirs, dtype)
                # In-place updates (batch_norm's running statistics) as torch makes them.
                _close(args, theirs_args, dtype)
            except AssertionError:
                exact = opinfo.op(*exact_args, **exact_kwargs)
                _no_further(ours, theirs, exact, dtype)
                _no_further(_float64(args), _float64(theirs_args), exact_args, dtype)
            matched += 1
    assert matched + refused, f"{opinfo.name} gave no samples in float32, float16 or bfloat16"
    with capsys.disabled():
        print(
            f"\n{opinfo.name}/{opinfo.variant_test_name or '-'} on {device}: "
            f"{matched} samples as torch, {refused} refused"
        )


def error_opinfos():
    # Those with error inputs (add's and mul's defaults yield none).
    return [
        p
        for p in opinfos()
        if p.values[0].error_inputs_func is not None
        and any(True for _ in p.values[0].error_inputs("cpu"))
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opinfo", error_opinfos())
def test_error_inputs_raise_what_torch_raises(opinfo, device):
    # OpInfo's error inputs (gelu's unknown approximation, rms_norm's empty or mismatched
    # normalized_shape and weight) name the error type and a pattern of torch's message: the
    # helper raises the same type matching the same pattern, in its one line naming opforge.
    helper = getattr(ot, MIRRORS[opinfo.name])
    count = 0
    for error in opinfo.error_inputs(device):
        sample = error.sample_input
        with pytest.raises(error.error_type, match=error.error_regex) as info:
            helper(sample.input, *sample.args, **sample.kwargs)
        assert "opforge" in str(info.value) and "\n" not in str(info.value)
        count += 1
    assert count > 0
