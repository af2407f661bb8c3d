"""A device index that does not exist is refused with one message, whichever way a tensor reaches it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import xladev

# Ways a tensor gets to `xla:<index>`: factories, copies from the host, moves between devices, modules.
WAYS = {
    "cpu tensor .to()": lambda d: torch.ones(2).to(d),
    ".to(device=, non_blocking=True)": lambda d: torch.ones(2).to(device=d, non_blocking=True),
    "torch.ones(device=)": lambda d: torch.ones(2, device=d),
    "torch.zeros(device=torch.device)": lambda d: torch.zeros(2, device=torch.device(d)),
    "torch.empty(device=)": lambda d: torch.empty(2, device=d),
    "torch.full(device=)": lambda d: torch.full((2,), 3.0, device=d),
    "torch.arange(device=)": lambda d: torch.arange(4, device=d),
    "torch.randn(device=)": lambda d: torch.randn(2, device=d),
    "torch.randperm(device=)": lambda d: torch.randperm(4, device=d),
    "torch.tensor(device=)": lambda d: torch.tensor([1.0, 2.0], device=d),
    "torch.as_tensor(list, device=)": lambda d: torch.as_tensor([1, 2], device=d),
    "empty_like(cpu, device=)": lambda d: torch.empty_like(torch.ones(2), device=d),
    "module.to()": lambda d: nn.Linear(2, 2).to(d),
    "xla tensor .to()": lambda d: torch.ones(2, device="xla").to(d),
    "xla tensor .to(device, dtype)": lambda d: torch.ones(2, device="xla").to(d, torch.float64),
    "xla zeros_like(device=)": lambda d: torch.zeros_like(torch.ones(2, device="xla"), device=d),
    "xla new_zeros(device=)": lambda d: torch.ones(2, device="xla").new_zeros(3, device=d),
    "xla new_tensor(device=)": lambda d: torch.ones(2, device="xla").new_tensor([1.0], device=d),
    "torch.xla.get_rng_state()": lambda d: torch.xla.get_rng_state(d),
}


def _expected_message(index: int) -> str:
    with pytest.raises(ValueError) as info:
        xladev.device(index)
    return str(info.value)


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("offset", [0, 4])
def test_missing_index_raises_the_device_error(way, offset):
    index = xladev.device_count() + offset
    expected = _expected_message(index)
    assert f"xla:{index} does not exist" in expected
    with pytest.raises(ValueError) as info:
        WAYS[way](f"xla:{index}")
    assert str(info.value) == expected


@pytest.mark.parametrize("way", list(WAYS))
def test_existing_index_still_works(way):
    result = WAYS[way]("xla:0")
    device = result.weight.device if isinstance(result, nn.Module) else result.device
    assert device == (torch.device("cpu") if way == "torch.xla.get_rng_state()" else xladev.device(0))


def test_like_and_new_ops_honour_a_cpu_device():
    # `device=` used to be dropped on device tensors: the result stayed on xla.
    x = torch.arange(6.0, device="xla").view(2, 3)
    for out in (torch.zeros_like(x, device="cpu"), x.new_ones(4, device="cpu"), torch.full_like(x, 2.0, device="cpu")):
        assert type(out) is torch.Tensor and out.device.type == "cpu"
    assert torch.full_like(x, 2.0, device="cpu").tolist() == [[2.0] * 3] * 2
    assert x.new_zeros(3, dtype=torch.int32, device="cpu").dtype == torch.int32


def test_second_device_is_used_when_it_exists():
    """With two (host) devices, `xla:1` is accepted everywhere and results land there; `xla:2` is refused."""
    program = textwrap.dedent("""
        import torch, torch.nn as nn, xladev
        assert xladev.device_count() == 2
        x = torch.ones(2, device="xla")
        made = [torch.ones(2, device="xla:1"), torch.ones(2).to("xla:1"), x.to("xla:1"),
                torch.zeros_like(x, device="xla:1"), x.new_full((2,), 7.0, device="xla:1"),
                torch.tensor([1.0, 2.0], device="xla:1"), nn.Linear(2, 2).to("xla:1").weight]
        assert all(str(t.device) == "xla:1" for t in made), [t.device for t in made]
        assert (made[0] + made[3]).tolist() == [1.0, 1.0] and made[4].tolist() == [7.0, 7.0]
        for bad in (lambda: torch.ones(2, device="xla:2"), lambda: x.to("xla:2")):
            try:
                bad()
            except ValueError as exc:
                assert str(exc) == "xla:2 does not exist: this process has 2 xla device(s)", exc
            else:
                raise AssertionError("xla:2 was accepted")
        print("ok")
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", PJRT_DEVICE="CPU")
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
