"""FSDP and ZeRO-1 in one process (world size 1): argument errors, the auto-wrap policies, checkpoint_module, a freed
full parameter read by mistake. Training over 2 processes is tests/distributed/test_fsdp_job.py.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn as nn

import xladev
import xladev.fsdp as fsdp
from xladev.runtime.compile.compilation import XlaCompileError


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.b(self.a(x))


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(RuntimeError, match=r"Cannot wrap a module that is already wrapped with FSDP"):
        fsdp.FSDP(fsdp.FSDP(nn.Linear(2, 2)))
    with pytest.raises(RuntimeError, match=r"must define a `forward` method: ModuleList has none"):
        fsdp.FSDP(nn.ModuleList([nn.Linear(2, 2)]))
    with pytest.raises(ValueError, match=r"compute_dtype must be one of .*, not torch.int32"):
        fsdp.FSDP(nn.Linear(2, 2), compute_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"sharding_rank and sharding_world_size must be provided"):
        fsdp.FSDP(nn.Linear(2, 2), sharding_groups=[[0]])
    with pytest.raises(TypeError, match=r"only float32 parameters are supported; weight is torch.float64"):
        fsdp.FSDP(nn.Linear(2, 2).double())
    inner = Pair()
    inner.a = fsdp.FSDP(inner.a)
    with pytest.raises(ValueError, match=r"Expected a to NOT be FullyShardedDataParallel if using an `auto_wrap_policy`"):
        fsdp.FSDP(inner, auto_wrap_policy=fsdp.always_wrap_policy)
    with pytest.raises(ValueError, match=r"_debug_dummy_forward_pass is not supported by xladev"):
        fsdp.FSDP(nn.Linear(2, 2), _debug_dummy_forward_pass=True)
    with pytest.raises(ValueError, match=r"ZeroRedundancyOptimizer: a parameter is on cpu; move the model"):
        fsdp.ZeroRedundancyOptimizer(nn.Linear(2, 2).parameters(), torch.optim.SGD, lr=0.1)


def _wrapped(model: nn.Module) -> list[str]:
    """The names of the modules FSDP wraps, in the unwrapped model's names."""
    return sorted(name.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", "").removesuffix("_fpw_module")
                  .rstrip(".") for name, m in model.named_modules() if isinstance(m, fsdp.FSDP))


def test_auto_wrap_policies_pick_the_modules_they_name():
    size = functools.partial(fsdp.size_based_auto_wrap_policy, min_num_params=50)
    # a: 40 parameters, b: 72 + 18 = 90 (its first Linear 72, its last 18): b's first Linear is wrapped, and b's
    # remainder (18) is too small; a is too small.
    assert _wrapped(fsdp.FSDP(Pair(), auto_wrap_policy=size)) == ["", "b.0"]
    by_type = functools.partial(fsdp.transformer_auto_wrap_policy, transformer_layer_cls={nn.Sequential})
    assert _wrapped(fsdp.FSDP(Pair(), auto_wrap_policy=by_type)) == ["", "b"]
    by_lambda = functools.partial(fsdp.lambda_auto_wrap_policy, lambda_fn=lambda m: isinstance(m, nn.Linear))
    assert _wrapped(fsdp.FSDP(Pair(), auto_wrap_policy=by_lambda)) == ["", "a", "b.0", "b.2"]
    # every submodule, the parameterless ReLU too (its FSDP holds no shard)
    assert _wrapped(fsdp.FSDP(Pair(), auto_wrap_policy=fsdp.always_wrap_policy)) == ["", "a", "b", "b.0", "b.1", "b.2"]


def test_checkpoint_module_recomputes_and_keeps_gradients_and_keyword_arguments():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return torch.tanh(self.fc(x)) * scale

    torch.manual_seed(0)
    plain, checked = Scaled(), Scaled()
    checked.load_state_dict(plain.state_dict())
    assert fsdp.checkpoint_module(checked) is checked
    x = torch.randn(3, 4)
    runs = []
    for module in (plain, checked):
        module = module.to(xladev.device())
        inp = x.to(xladev.device()).requires_grad_()
        module(inp, scale=2.0).sum().backward()
        runs.append((inp.grad, module.fc.weight.grad))
    xladev.mark_step()
    for have, want in zip(runs[1], runs[0]):
        torch.testing.assert_close(have.cpu(), want.cpu(), rtol=0, atol=0)  # the same graph ops, recomputed
    with pytest.raises(TypeError, match=r"checkpoint_module takes an nn.Module, got function"):
        fsdp.checkpoint_module(lambda x: x)


def test_a_freed_full_parameter_read_outside_the_forward_fails_naming_it():
    model = fsdp.FSDP(nn.Linear(4, 2))
    out = model(torch.randn(3, 4).to(xladev.device()))
    out.sum().backward()
    xladev.mark_step()
    assert model.module.weight.shape == (2, 4)  # the leaf keeps its shape; its value is gone
    with pytest.raises(XlaCompileError, match=r"the full parameter weight of the Linear wrapped by FSDP is freed "
                                              r"outside that module's forward and backward"):
        model.module.weight.sum().item()
    # the shards, the only parameters, hold the values
    assert [tuple(p.shape) for p in model.parameters()] == [(128,), (128,)]
    assert model(torch.ones(1, 4).to(xladev.device())).shape == (1, 2)
