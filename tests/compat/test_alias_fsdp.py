"""`torch_xla.distributed.fsdp` and `zero_redundancy_optimizer` under `xladev run` are xladev's FSDP and ZeRO-1."""

from __future__ import annotations

import pytest

import xladev.fsdp as fsdp


def test_the_torch_xla_names_are_xladevs(tx):
    from torch_xla.distributed.fsdp import (
        XlaFullyShardedDataParallel, checkpoint_module, consolidate_sharded_model_checkpoints,
    )
    from torch_xla.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy
    from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

    assert XlaFullyShardedDataParallel is fsdp.FSDP and ZeroRedundancyOptimizer is fsdp.ZeroRedundancyOptimizer
    assert checkpoint_module is fsdp.checkpoint_module
    assert consolidate_sharded_model_checkpoints is fsdp.consolidate_sharded_model_checkpoints
    assert size_based_auto_wrap_policy is fsdp.size_based_auto_wrap_policy
    assert transformer_auto_wrap_policy is fsdp.transformer_auto_wrap_policy
    with pytest.raises(ImportError, match=r"^torch_xla\.distributed\.fsdp\.utils\.XLAPatchedLinear is not supported by "
                                          r"xladev: of fsdp\.utils, xladev provides checkpoint_module"):
        exec("from torch_xla.distributed.fsdp.utils import XLAPatchedLinear", {})


def test_maybe_convert_to_cpu_copies_a_state_dicts_device_tensors(tx):
    """`xm._maybe_convert_to_cpu`, which PyTorch/XLA's test_zero1 applies to optimizer state_dicts."""
    import torch

    xm = tx.xm
    t = torch.ones(2, device="xla") * 3
    state = {"state": {0: {"momentum_buffer": t, "again": t}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    cpu = xm._maybe_convert_to_cpu(state)
    moved = cpu["state"][0]
    assert moved["momentum_buffer"].device.type == "cpu" and moved["momentum_buffer"].tolist() == [3.0, 3.0]
    assert moved["again"] is moved["momentum_buffer"]  # one tensor met twice stays one
    assert cpu["param_groups"] == state["param_groups"] and state["state"][0]["momentum_buffer"] is t
    assert xm._maybe_convert_to_cpu(state, convert=False) is state
