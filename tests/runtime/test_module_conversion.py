"""Shared tensors stay shared through module.to('xla') and back, deepcopy, save/load and load_state_dict."""

from __future__ import annotations

import copy
import io
import weakref

import pytest
import torch
from torch import nn

import xladev


class TiedLM(nn.Module):
    """An embedding tied to the output projection (as GPT-2, T5 and Whisper do), and a shared buffer."""

    def __init__(self, vocab: int = 11, dim: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((dim,), 0.5))
        self.body.register_buffer("scale", self.scale)  # the same buffer held by two modules

    def forward(self, ids):
        return self.head(torch.tanh(self.body(self.embed(ids)) * self.body.scale))


def _loss(model, ids):
    logits = model(ids)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


def test_to_device_keeps_ties_and_parameter_objects():
    torch.manual_seed(0)
    model = TiedLM()
    params_before = list(model.parameters())
    shared = model.embed.weight
    model.to(xladev.device())
    assert model.head.weight is model.embed.weight
    assert model.embed.weight is shared  # the same Parameter object, as `.to('cuda')` keeps it
    assert isinstance(shared, nn.Parameter) and shared.device.type == "xla"
    assert list(model.parameters()) == params_before
    assert model.body.scale is model.scale and model.scale.device.type == "xla"
    model.to("cpu")
    assert model.head.weight is model.embed.weight is shared and shared.device.type == "cpu"
    assert type(shared) is nn.Parameter


def test_optimizer_built_before_the_move_trains_the_device_tensors_like_eager():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    model = copy.deepcopy(cpu_model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # built before the move, as on cuda
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    model.to(xladev.device())
    ids = torch.randint(0, 11, (3, 5))
    device_ids = ids.to(xladev.device())
    for _ in range(3):
        for m, o, x in ((model, opt, device_ids), (cpu_model, cpu_opt, ids)):
            o.zero_grad()
            _loss(m, x).backward()
            o.step()
        xladev.mark_step()
    assert model.head.weight is model.embed.weight
    # Three AdamW steps move each weight by at most ~3 lr; float32 rounding stays far below that.
    torch.testing.assert_close(model.embed.weight.cpu(), cpu_model.embed.weight, rtol=1e-5, atol=1e-5)
    assert len(opt.state) == len(list(model.parameters()))


def test_gradients_follow_the_move_and_stay_shared():
    torch.manual_seed(0)
    model = TiedLM()
    _loss(model, torch.randint(0, 11, (2, 4))).backward()
    grad = model.embed.weight.grad.clone()
    model.to(xladev.device())
    assert model.head.weight.grad is model.embed.weight.grad
    assert model.embed.weight.grad.device.type == "xla"
    torch.testing.assert_close(model.embed.weight.grad.cpu(), grad, rtol=0, atol=0)


def test_deepcopy_save_load_and_load_state_dict_keep_ties():
    torch.manual_seed(0)
    model = TiedLM().to(xladev.device())
    clone = copy.deepcopy(model)
    assert clone.head.weight is clone.embed.weight and clone.embed.weight is not model.embed.weight
    assert isinstance(clone.embed.weight, nn.Parameter) and clone.embed.weight.requires_grad
    torch.testing.assert_close(clone.embed.weight.cpu(), model.embed.weight.cpu(), rtol=0, atol=0)
    with torch.no_grad():
        clone.embed.weight.add_(1.0)  # the copy is independent of the original
    assert not torch.equal(clone.embed.weight.cpu(), model.embed.weight.cpu())

    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.head.weight is loaded.embed.weight and loaded.embed.weight.device.type == "xla"
    assert isinstance(loaded.embed.weight, nn.Parameter)

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    # As with CPU tensors: two entries, one storage.
    assert state["head.weight"]._st is state["embed.weight"]._st
    fresh = TiedLM().to(xladev.device())
    fresh.load_state_dict(state)
    assert fresh.head.weight is fresh.embed.weight
    torch.testing.assert_close(fresh.head.weight.cpu(), model.embed.weight.cpu(), rtol=0, atol=0)


def test_a_parameter_that_cannot_be_swapped_still_keeps_its_ties():
    torch.manual_seed(0)
    model = TiedLM()
    watcher = weakref.ref(model.body.weight)  # a weak reference forbids swapping that tensor in place
    model.to(xladev.device())
    assert watcher is not None
    assert model.head.weight is model.embed.weight
    assert all(p.device.type == "xla" for p in model.parameters())
    assert isinstance(model.body.weight, nn.Parameter)


@pytest.mark.parametrize("flag", [True, False])
def test_the_users_swap_setting_is_left_as_it_was(flag):
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(flag)
    try:
        model = TiedLM().to(xladev.device())
        assert model.head.weight is model.embed.weight
        assert torch.__future__.get_swap_module_params_on_conversion() is flag
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def test_copy_copy_of_a_device_tensor_shares_its_data_as_on_the_cpu():
    """`copy.copy` (PyTorch/XLA's `ToXlaTensorArena` copies what it does not convert) used to fail: it took
    `__reduce_ex__`'s pickling path. As on the CPU, the copy is a new tensor over the same data, with the leaf's
    requires_grad and the user's attributes; a Parameter stays one."""
    t = torch.ones(3, device=xladev.device(), requires_grad=True)
    t.note = "kept"
    c = copy.copy(t)
    assert c is not t and c.requires_grad and c.is_leaf and c.note == "kept"
    with torch.no_grad():
        c[0] = 5.0
    assert t.cpu().tolist() == [5.0, 1.0, 1.0]
    p = torch.nn.Parameter(torch.zeros(2, device=xladev.device()))
    q = copy.copy(p)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad
