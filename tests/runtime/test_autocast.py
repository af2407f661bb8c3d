"""`torch.autocast("xla")` applies PyTorch/XLA's autocast policy, and no op hits the `Autocastxla` key unhandled.

The expected dtypes are written out here from PyTorch/XLA's policy (its `torch_xla/csrc/autocast_mode.cpp`:
the lower-precision list, the float32 list and the promote list), one real call per op on the device,
independently of xladev's tables. Unlisted ops run in their inputs' dtype; in-place ops, float64 tensors,
integer tensors and CPU tensors are never cast.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import xladev
import xladev.amp

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def _r(*shape, dtype=F32):
    return torch.randn(*shape).to(dtype).to(xladev.device())


def _labels(n, classes):
    return torch.randint(0, classes, (n,)).to(xladev.device())


# op name -> a call on float32 device tensors; each runs in the autocast dtype (PyTorch/XLA's lower_precision_fp).
LOWER_PRECISION = {
    "mm": lambda: torch.mm(_r(3, 4), _r(4, 5)),
    "bmm": lambda: torch.bmm(_r(2, 3, 4), _r(2, 4, 5)),
    "matmul": lambda: _r(3, 4) @ _r(4, 5),
    "addmm": lambda: torch.addmm(_r(3, 5), _r(3, 4), _r(4, 5)),
    "baddbmm": lambda: torch.baddbmm(_r(2, 3, 5), _r(2, 3, 4), _r(2, 4, 5)),
    "addbmm": lambda: torch.addbmm(_r(3, 5), _r(2, 3, 4), _r(2, 4, 5)),
    "linear": lambda: F.linear(_r(3, 4), _r(5, 4), _r(5)),
    "conv1d": lambda: F.conv1d(_r(1, 2, 8), _r(3, 2, 3), _r(3)),
    "conv1d.padding": lambda: F.conv1d(_r(1, 2, 8), _r(3, 2, 3), padding="same"),
    "conv2d": lambda: F.conv2d(_r(1, 2, 6, 6), _r(3, 2, 3, 3), _r(3)),
    "conv2d.padding": lambda: F.conv2d(_r(1, 2, 6, 6), _r(3, 2, 3, 3), padding="same"),
    "conv3d": lambda: F.conv3d(_r(1, 2, 4, 4, 4), _r(3, 2, 3, 3, 3)),
    "conv_transpose1d": lambda: F.conv_transpose1d(_r(1, 2, 5), _r(2, 3, 3)),
    "conv_transpose2d": lambda: F.conv_transpose2d(_r(1, 2, 4, 4), _r(2, 3, 3, 3)),
    "prelu": lambda: F.prelu(_r(2, 3), _r(3)),
    "relu": lambda: F.relu(_r(2, 3)),
    "max_pool2d": lambda: F.max_pool2d(_r(1, 2, 4, 4), 2),
    "einsum": lambda: torch.einsum("ij,jk->ik", _r(3, 4), _r(4, 5)),
}

# op name -> a call on bfloat16 device tensors; each runs in float32 (PyTorch/XLA's fp32 list).
FLOAT32 = {
    "softmax": lambda: torch.softmax(_r(2, 5, dtype=BF16), -1),
    "log_softmax": lambda: F.log_softmax(_r(2, 5, dtype=BF16), -1),
    "batch_norm": lambda: F.batch_norm(_r(4, 3, dtype=BF16), None, None, _r(3), _r(3), training=True),
    "binary_cross_entropy": lambda: F.binary_cross_entropy(torch.sigmoid(_r(4, dtype=BF16)), _r(4).sigmoid()),
    "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(_r(4, dtype=BF16), _r(4).sigmoid()),
    "pow": lambda: _r(4, dtype=BF16).pow(2),
    "prod": lambda: _r(4, dtype=BF16).prod(),
    "prod.dim_int": lambda: _r(2, 4, dtype=BF16).prod(1),
    "cdist": lambda: torch.cdist(_r(3, 4, dtype=BF16), _r(5, 4, dtype=BF16)),
    "trace": lambda: torch.trace(_r(3, 3, dtype=BF16)),
    "mse_loss": lambda: F.mse_loss(_r(4, dtype=BF16), _r(4, dtype=BF16)),
    "l1_loss": lambda: F.l1_loss(_r(4, dtype=BF16), _r(4, dtype=BF16)),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(_r(4, dtype=BF16), _r(4, dtype=BF16)),
    "cross_entropy": lambda: F.cross_entropy(_r(4, 5, dtype=BF16), _labels(4, 5)),
    "nll_loss": lambda: F.nll_loss(_r(4, 5, dtype=BF16), _labels(4, 5)),
    "kl_div": lambda: F.kl_div(_r(4, dtype=BF16), _r(4, dtype=BF16), log_target=True, reduction="batchmean"),
    "hinge_embedding_loss": lambda: F.hinge_embedding_loss(_r(4, dtype=BF16), torch.ones(4).to(xladev.device())),
    "margin_ranking_loss": lambda: F.margin_ranking_loss(_r(4, dtype=BF16), _r(4, dtype=BF16), _r(4).sign()),
    "soft_margin_loss": lambda: F.soft_margin_loss(_r(4, dtype=BF16), _r(4).sign()),
    "cosine_embedding_loss": lambda: F.cosine_embedding_loss(_r(3, 4, dtype=BF16), _r(3, 4, dtype=BF16),
                                                             _r(3).sign()),
    "triplet_margin_loss": lambda: F.triplet_margin_loss(_r(3, 4, dtype=BF16), _r(3, 4, dtype=BF16),
                                                         _r(3, 4, dtype=BF16)),
    "multi_margin_loss": lambda: F.multi_margin_loss(_r(4, 5, dtype=BF16), _labels(4, 5)),
    "reflection_pad1d": lambda: F.pad(_r(1, 2, 5, dtype=BF16), (2, 2), mode="reflect"),
    "reflection_pad2d": lambda: F.pad(_r(1, 2, 5, 5, dtype=BF16), (1, 1, 1, 1), mode="reflect"),
    "replication_pad1d": lambda: F.pad(_r(1, 2, 5, dtype=BF16), (2, 2), mode="replicate"),
    "replication_pad2d": lambda: F.pad(_r(1, 2, 5, 5, dtype=BF16), (1, 1, 1, 1), mode="replicate"),
    "inverse": lambda: torch.inverse(_r(3, 3, dtype=BF16) + 4 * torch.eye(3, dtype=BF16).to(xladev.device())),
}

# op name -> (a call, the dtype PyTorch/XLA's promote policy gives: the widest of the autocast dtype and the inputs).
PROMOTE = {
    "cat of bfloat16 and float32": (lambda: torch.cat([_r(2, dtype=BF16), _r(2)]), F32),
    "cat of float32": (lambda: torch.cat([_r(2), _r(2)]), F32),
    "cat of bfloat16": (lambda: torch.cat([_r(2, dtype=BF16), _r(2, dtype=BF16)]), BF16),
    "stack of bfloat16 and float32": (lambda: torch.stack([_r(2, dtype=BF16), _r(2)]), F32),
    "index_copy of bfloat16 into float32": (
        lambda: _r(4).index_copy(0, torch.tensor([0, 2]).to(xladev.device()), _r(2, dtype=BF16)), F32),
}

# op name -> (a call, its dtype): ops autocast leaves alone run in their inputs' dtype.
UNTOUCHED = {
    "add (not listed)": (lambda: _r(3) + _r(3), F32),
    "layer_norm (not listed for XLA)": (lambda: F.layer_norm(_r(2, 4, dtype=BF16), (4,)), BF16),
    "gelu (not listed)": (lambda: F.gelu(_r(3, dtype=BF16)), BF16),
    "in-place addmm_": (lambda: _r(3, 5).addmm_(_r(3, 4), _r(4, 5)), F32),
    "mm of float64": (lambda: torch.mm(_r(3, 4, dtype=F64), _r(4, 5, dtype=F64)), F64),
    "mm on the CPU": (lambda: torch.mm(torch.randn(3, 4), torch.randn(4, 5)), F32),
    "mm of integers": (lambda: torch.mm(_r(3, 4).int(), _r(4, 5).int()), torch.int32),
}


@pytest.mark.parametrize("name", sorted(LOWER_PRECISION))
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_lower_precision_ops_run_in_the_autocast_dtype(name, dtype):
    with torch.autocast("xla", dtype=dtype):
        out = LOWER_PRECISION[name]()
    assert out.dtype == dtype and out.device.type == "xla"
    assert torch.isfinite(out.float().cpu()).all()  # and it runs: the graph compiles and executes


@pytest.mark.parametrize("name", sorted(FLOAT32))
def test_float32_ops_run_in_float32(name):
    with torch.autocast("xla", dtype=BF16):
        out = FLOAT32[name]()
    assert out.dtype == F32
    out.cpu()


@pytest.mark.parametrize("name", sorted(PROMOTE))
def test_promote_ops_run_in_the_widest_dtype(name):
    call, dtype = PROMOTE[name]
    with torch.autocast("xla", dtype=BF16):
        assert call().dtype == dtype


@pytest.mark.parametrize("name", sorted(UNTOUCHED))
def test_other_ops_and_ineligible_tensors_are_not_cast(name):
    call, dtype = UNTOUCHED[name]
    with torch.autocast("xla", dtype=BF16):
        assert call().dtype == dtype


def test_outside_the_region_and_when_disabled_nothing_is_cast():
    a, b = _r(3, 4), _r(4, 5)
    assert torch.mm(a, b).dtype == F32
    with torch.autocast("xla", enabled=False):
        assert torch.mm(a, b).dtype == F32
    with torch.autocast("xla"):
        with torch.autocast("xla", enabled=False):
            assert torch.mm(a, b).dtype == F32
        assert torch.mm(a, b).dtype == BF16
    assert torch.mm(a, b).dtype == F32


def test_default_dtype_is_bfloat16_as_in_pytorch_xla():
    with torch.autocast("xla"):
        assert torch.mm(_r(2, 2), _r(2, 2)).dtype == BF16
    with xladev.amp.autocast(xladev.device()):
        assert torch.mm(_r(2, 2), _r(2, 2)).dtype == BF16
    with xladev.amp.autocast("xla:0", dtype=F16):
        assert torch.mm(_r(2, 2), _r(2, 2)).dtype == F16


def test_torchs_deprecated_xla_queries_answer_for_this_device():
    """PyTorch/XLA's code asks `torch.is_autocast_xla_enabled()`: it answers as `torch.is_autocast_enabled("xla")`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert not torch.is_autocast_xla_enabled()
        with xladev.amp.autocast(xladev.device(), dtype=F16):
            assert torch.is_autocast_xla_enabled() and torch.get_autocast_xla_dtype() == F16
        with torch.autocast("xla"):
            assert torch.is_autocast_xla_enabled() and torch.get_autocast_xla_dtype() == BF16
        torch.set_autocast_xla_enabled(True)
        try:
            assert torch.is_autocast_enabled("xla") and torch.mm(_r(2, 2), _r(2, 2)).dtype == BF16
        finally:
            torch.set_autocast_xla_enabled(False)
        assert not torch.is_autocast_xla_enabled()
    with pytest.warns(DeprecationWarning, match="is_autocast_xla_enabled"):
        torch.is_autocast_xla_enabled()


def test_gradients_flow_back_through_the_casts_in_float32():
    w = _r(5, 4).requires_grad_()
    x = _r(3, 4)
    with torch.autocast("xla"):
        y = F.linear(x, w)
        loss = F.cross_entropy(y, _labels(3, 5))
    assert (y.dtype, loss.dtype) == (BF16, F32)
    loss.backward()
    assert w.grad.dtype == F32 and torch.isfinite(w.grad.cpu()).all()


def test_ops_autocast_does_not_list_never_reach_the_autocast_key_unhandled():
    # Before the fallthrough, each of these failed with "Could not run 'aten::...' with arguments from the
    # 'Autocastxla' backend" and a 60-line dispatcher dump.
    device = xladev.device()
    with torch.autocast("xla"):
        t = torch.zeros(4, device=device)
        t.copy_(torch.arange(4.0))
        t[1] = 7.0
        u = torch.ones(2, 3, device=device).t().contiguous()
        e = F.embedding(torch.tensor([1, 0]).to(device), _r(3, 2))
        s = (t.sum() + u.mean() + e.sum()).to("cpu")
    assert t.cpu().tolist() == [0.0, 7.0, 2.0, 3.0] and torch.isfinite(s)


def test_an_unsupported_dtype_warns_and_disables_autocast_as_torch_does():
    with pytest.warns(UserWarning, match="In xla autocast, but the target dtype is not supported. Disabling autocast"):
        region = torch.autocast("xla", dtype=F64)
    with region:
        assert torch.mm(_r(2, 2), _r(2, 2)).dtype == F32
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        with xladev.amp.autocast(xladev.device(), dtype=torch.int32):
            assert torch.mm(_r(2, 2), _r(2, 2)).dtype == F32


def test_xladev_amp_autocast_refuses_a_device_that_is_not_xla():
    with pytest.raises(ValueError, match=r"autocast\('cpu'\): xladev.amp.autocast is for xla devices; use "
                                         r"torch.autocast\('cpu'\)"):
        xladev.amp.autocast("cpu")


def test_autocast_region_as_a_decorator_and_no_warning_for_supported_dtypes():
    @xladev.amp.autocast(xladev.device())
    def forward(a, b):
        return a @ b

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert forward(_r(2, 3), _r(3, 2)).dtype == BF16


def test_the_docs_policy_table_is_the_runtimes():
    from pathlib import Path

    from xladev.runtime.record import autocast

    doc = (Path(__file__).resolve().parents[2] / "docs" / "amp.md").read_text()
    rows = doc.split("<!-- policy table:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    listed = [[name.strip(" `") for name in row.split("|")[2].split(",")] for row in rows]
    assert listed == [list(autocast.LOWER_PRECISION_FP), list(autocast.FP32), list(autocast.PROMOTE)]


def test_torch_compile_traces_the_same_casts():
    linear, x = torch.nn.Linear(8, 4).to(xladev.device()), _r(2, 8)

    def forward(x):
        with torch.autocast("xla"):
            logits = linear(x)
            return logits, torch.softmax(logits, -1)

    compiled = torch.compile(forward, backend="xladev")(x)
    lazy = forward(x)
    assert [t.dtype for t in compiled] == [t.dtype for t in lazy] == [BF16, F32]
    for have, want in zip(compiled, lazy):
        assert torch.equal(have.cpu(), want.cpu())  # the same ops in the same dtypes: the same bits


def test_the_einsum_patched_linear_runs_in_the_autocast_dtype_both_ways():
    # PyTorch/XLA's XLAPatchedLinear casts its inputs under autocast (custom_fwd) and runs its backward under
    # the forward's autocast state (custom_bwd): every einsum of the layer, forward and backward, is bf16.
    from xladev.runtime.distributed.spmd_autograd import xla_patched_nn_linear_forward

    linear = torch.nn.Linear(10, 15).to(xladev.device())
    x = _r(5, 10).requires_grad_()
    with torch.autocast("xla"):
        out = xla_patched_nn_linear_forward(linear, x)
        assert out.dtype == BF16
        loss = (out.float() ** 2).mean()
    loss.backward()
    assert linear.weight.grad.dtype == x.grad.dtype == F32  # cast back to the parameters' dtype
    hlo = xladev.debug.get_tensors_hlo([linear.weight.grad, x.grad])
    dots = [line for line in hlo.splitlines() if " dot(" in line]
    assert len(dots) == 3 and all(" = bf16[" in line for line in dots), dots  # forward, grad_input, grad_weight
    # Outside autocast nothing is cast.
    assert xla_patched_nn_linear_forward(linear, _r(5, 10)).dtype == F32
