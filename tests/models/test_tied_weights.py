"""Tied weights stay one tensor on `xla`: transformers' GPT-2, T5 and Whisper tie their output projection
to the input embedding (T5 ties the encoder's and decoder's embeddings too).

A tie that comes apart trains two copies that drift apart without an error, so each way a model
reaches or leaves the device is checked: `model.to(xladev.device())`, `copy.deepcopy`,
`load_state_dict`, `torch.save`/`torch.load` (whole modules and state dicts, through an io.BytesIO;
device tensors pickle via the CPU) and `model.to('cpu')` back. Training keeps the tie and matches eager
(the parity run of the zoo, shared with test_transformers).
"""

from __future__ import annotations

import copy
import io

import pytest
import torch

import xladev
from tests.models import zoo
from tests.models.conftest import assert_parity
from tests.models.harness import build

# The ties transformers makes for each model: names of one shared Parameter.
TIES = {
    "gpt2": [["transformer.wte.weight", "lm_head.weight"]],
    "t5": [["shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"]],
    "whisper": [["model.decoder.embed_tokens.weight", "proj_out.weight"]],
}


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """Names that refer to one Parameter object, per object, for every object with more than one name."""
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def assert_tied(model: torch.nn.Module, name: str, device_type: str) -> None:
    """The model's ties are exactly transformers' ties, the tensors live on `device_type`."""
    assert tied_groups(model) == TIES[name], f"{name}: ties {tied_groups(model)} on {device_type}"
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for group in TIES[name]:
        first = model.get_parameter(group[0])
        assert all(model.get_parameter(n) is first for n in group), group
        assert first.device.type == device_type, f"{group[0]} is on {first.device}"


def assert_same_values(model: torch.nn.Module, reference: dict[str, torch.Tensor]) -> None:
    for name, value in model.state_dict().items():
        assert torch.equal(value.detach().cpu(), reference[name]), name


def _cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().cpu().clone() for n, t in model.state_dict().items()}


@pytest.fixture(params=list(TIES))
def tied(request):
    """(case name, its float32 CPU model, a copy of its values), with transformers' ties checked on the CPU."""
    model = build(zoo.TRANSFORMERS[request.param])
    assert_tied(model, request.param, "cpu")
    return request.param, model, _cpu_state(model)


def test_to_device_and_back_keeps_ties(tied):
    name, model, values = tied
    moved = model.to(xladev.device())
    assert moved is model
    assert_tied(model, name, "xla")
    assert_same_values(model, values)
    model.to("cpu")
    assert_tied(model, name, "cpu")
    assert_same_values(model, values)


def test_deepcopy_on_device_keeps_ties(tied):
    name, model, values = tied
    model.to(xladev.device())
    clone = copy.deepcopy(model)
    assert_tied(clone, name, "xla")
    assert_same_values(clone, values)
    shared = {id(p) for p in model.parameters()} & {id(p) for p in clone.parameters()}
    assert not shared, "a deep copy must not share parameters with its original"


def test_load_state_dict_on_device_keeps_ties(tied):
    name, model, values = tied
    torch.manual_seed(1)  # different initial weights, so loading visibly changes them
    target = zoo.TRANSFORMERS[name].model().to(xladev.device())
    target.load_state_dict(model.state_dict())
    assert_tied(target, name, "xla")
    assert_same_values(target, values)
    with torch.no_grad():  # the loaded tie is one tensor: a write through one name shows through all
        target.get_input_embeddings().weight.add_(1.0)
    for group in TIES[name]:
        heads = [target.state_dict()[n].cpu() for n in group]
        assert all(torch.equal(h, values[group[0]] + 1.0) for h in heads), group


def test_save_and_load_keep_ties(tied):
    name, model, values = tied
    model.to(xladev.device())
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert_tied(loaded, name, "xla")
    assert_same_values(loaded, values)

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    torch.manual_seed(1)
    fresh = zoo.TRANSFORMERS[name].model().to(xladev.device())
    fresh.load_state_dict(state)
    assert_tied(fresh, name, "xla")
    assert_same_values(fresh, values)
    for group in TIES[name]:  # as on the CPU, tied entries load as views of one storage
        with torch.no_grad():
            state[group[0]].add_(1.0)
        assert all(torch.equal(state[n].cpu(), values[group[0]] + 1.0) for n in group), f"saving split {group}"


def test_state_dict_saved_from_device_loads_with_torch_load_defaults():
    model = build(zoo.TRANSFORMERS["gpt2"]).to(xladev.device())
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)  # weights_only=True, PyTorch's default since 2.6
    head, embedding = state["lm_head.weight"], state["transformer.wte.weight"]
    assert head.device.type == "xla"
    # Two entries over one storage, as eager CPU tensors load: a write to one shows in the other.
    with torch.no_grad():
        head.add_(1.0)
    assert torch.equal(head.cpu(), embedding.cpu())


@pytest.mark.parametrize("name", [pytest.param(name, marks=zoo.marks(name)) for name in TIES])
def test_training_keeps_ties_and_matches_eager(name, parity):
    summary = parity(name)
    # parity checks that the trained xla model has the CPU model's ties; here the tied names must
    # also hold one value, equal to eager's within the zoo's bounds.
    for group in TIES[name]:
        final = [summary.xla.state[n] for n in group]
        assert all(torch.equal(t, final[0]) for t in final), f"{group} came apart in training"
    assert_parity(summary)
