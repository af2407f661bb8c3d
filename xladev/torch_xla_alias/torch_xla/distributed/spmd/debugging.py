"""`torch_xla.distributed.spmd.debugging` on xladev: the sharding visualizers (rich), xladev's own."""

from __future__ import annotations

from xladev.spmd import visualize_sharding, visualize_tensor_sharding  # noqa: F401

from torch_xla import _xladev


def construct_v1_sharding_str(t) -> str:
    """`t`'s sharding in HLO's V1 text (`{devices=[2,1]0,1}`, a device list rather than `<=[4]`): xladev
    always writes that form, so this is `_get_xla_sharding_spec(t)`."""
    from xladev.runtime.distributed.spmd_sharding import get_sharding_spec

    return get_sharding_spec(t)

__getattr__ = _xladev.module_getattr(__name__)
