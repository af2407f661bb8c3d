"""Host→device uploads: the device keeps the values of the moment of the copy, whatever the host does next.

jax's CPU client may keep an aligned numpy array as the device buffer itself instead of copying it, and
xladev puts host arrays through jax's batched transfer below `jax.device_put` (backend.put). These tests
hold the contract that makes that safe: the array given to jax is xladev's own copy, so writing to or
dropping the user's CPU tensor never changes a device value.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import xladev
from xladev.events import TransferToDevice
from xladev.runtime.graph import backend

# A 0-d and a tiny tensor, and 64 x 64 float32 (16 KiB, aligned): the size that jax's CPU client takes
# without copying when given a numpy array directly.
SHAPES = [(), (3,), (64, 64)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", SHAPES)
def test_writing_the_host_tensor_after_an_upload_leaves_the_device_value(dev, shape, dtype):
    host = torch.ones(shape, dtype=dtype)
    on_device = host.to(dev)
    host.zero_()
    assert torch.equal(on_device.cpu(), torch.ones(shape, dtype=dtype))
    kept = host.to(dev)  # zeros, uploaded before a barrier
    xladev.mark_step()
    host.fill_(True if dtype == torch.bool else 3)
    del host
    gc.collect()
    assert torch.equal(kept.cpu(), torch.zeros(shape, dtype=dtype))
    assert torch.equal((on_device.to(torch.float32) + 1).cpu(), torch.full(shape, 2.0))


def test_a_jax_whose_private_transfer_differs_falls_back_to_device_put(dev, monkeypatch):
    def refuses(array, device):  # the call's signature in another jax version
        raise TypeError("batched_device_put() takes 4 positional arguments but 5 were given")

    monkeypatch.setattr(backend, "_direct_put", refuses)
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert torch.equal(values.to(dev).cpu(), values)
    assert backend._direct_put is None  # given up for good: no second failing call per upload
    assert torch.equal((values.to(dev) * 2).cpu(), values * 2)


def test_an_array_jax_cannot_hold_gets_jaxs_error_and_keeps_the_direct_path():
    direct = backend._direct_put
    with pytest.raises(TypeError, match="not a valid JAX array type"):
        backend.put(np.array([object()]), 0)
    assert backend._direct_put is direct


def test_an_empty_host_tensor_reaches_the_device_without_a_transfer(dev, events):
    # transformers' key-value caches start each layer, each step, from `torch.tensor([], device=...)`.
    keys = torch.tensor([], dtype=torch.float32, device=dev)
    grid = torch.empty(0, 3, device=dev)
    grid.copy_(torch.empty(0, 3, dtype=torch.float64))
    assert keys.shape == (0,) and keys.dtype == torch.float32 and grid.shape == (0, 3)
    joined = torch.cat([keys, torch.tensor([1.0, 2.0], device=dev)])  # and one transfer of real data
    assert torch.equal(joined.cpu(), torch.tensor([1.0, 2.0]))
    assert torch.equal(torch.cat([grid, torch.ones(2, 3, device=dev)]).cpu(), torch.ones(2, 3))
    assert [e.nbytes for e in events.of(TransferToDevice)] == [8]
    with pytest.raises(RuntimeError, match="shape"):
        torch.empty(0, 3, device=dev).copy_(torch.empty(0, 4))  # nothing to copy, but still not a broadcast
