"""The everyday helpers PyTorch/XLA's examples and tests call, through the alias, in-process on the real device:
`xm.RateTracker`, the RNG state, `xm.get_memory_info`, `torch_xla.utils.utils` and `serialization`, the debug
getters of `torch_xla._XLAC`, `torch_xla.real_devices` and `xr.get_num_cached_compilation_graph`."""

from __future__ import annotations

import gc
import os
import sys

import pytest
import torch


def test_rate_tracker_smooths_the_recent_rate_and_keeps_the_global_one(tx, monkeypatch):
    clock = iter([100.0, 101.0, 103.0, 103.0, 105.0])  # made, rate(), rate(), rate() with no time, global_rate()
    monkeypatch.setattr(sys.modules[tx.xm.RateTracker.__module__], "_clock", lambda: next(clock))
    monkeypatch.delenv("RATE_TRACKER_SMOOTHING", raising=False)
    tracker = tx.xm.RateTracker()
    tracker.add(10)
    assert tracker.rate() == pytest.approx(10.0)  # 10 items in 1 s, nothing to smooth with yet
    tracker.add(40)
    assert tracker.rate() == pytest.approx(0.6 * 20.0 + 0.4 * 10.0)  # 40 items in 2 s, blended 0.4 with the last
    assert tracker.rate() == 0.0  # no time passed
    assert tracker.global_rate() == pytest.approx(50 / 5.0)


def test_rate_tracker_takes_its_smoothing_from_the_environment(tx, monkeypatch):
    clock = iter([0.0, 1.0, 2.0])
    monkeypatch.setattr(sys.modules[tx.xm.RateTracker.__module__], "_clock", lambda: next(clock))
    monkeypatch.setenv("RATE_TRACKER_SMOOTHING", "0")
    tracker = tx.xm.RateTracker()
    tracker.add(5)
    tracker.rate()
    tracker.add(7)
    assert tracker.rate() == pytest.approx(7.0)  # factor 0: the raw rate


def test_rng_state_round_trips_advances_and_forks(tx):
    xm, device = tx.xm, tx.torch_xla.device()
    xm.set_rng_state(1234)
    assert xm.get_rng_state() == 1234
    xm.set_rng_state(2**64 + 5)  # taken modulo 2**64, as a 64-bit seed
    assert xm.get_rng_state() == 5
    torch.rand(3, device=device)
    state = xm.get_rng_state()
    assert state != 5  # a random op advances the generator
    first = torch.rand(4, device=device).cpu()
    xm.set_rng_state(state)
    assert torch.equal(torch.rand(4, device=device).cpu(), first)
    before = xm.get_rng_state()
    with xm.fork_rng():
        torch.rand(2, device=device)
    assert xm.get_rng_state() == before
    with xm.fork_rng(enabled=False):
        torch.rand(2, device=device)
    assert xm.get_rng_state() != before
    assert tx.torch_xla._XLAC._xla_get_rng_seed("") == xm.get_rng_state()
    assert tx.torch_xla.xm is xm  # PyTorch/XLA's tests reach it as torch_xla.xm


def test_memory_info_follows_the_live_device_buffers(tx):
    xm, device = tx.xm, tx.torch_xla.device()
    tx.torch_xla.sync(wait=True)
    gc.collect()
    before = xm.get_memory_info()
    assert set(before) == {"bytes_used", "bytes_limit", "peak_bytes_used"}
    big = torch.ones(1000, 1000, device=device) * 2  # 4 MB once computed
    tx.torch_xla.sync(wait=True)
    during = xm.get_memory_info(device)
    # The 4 MB array, give or take the few scalar buffers (RNG key, constants) that come and go between calls.
    slack = 4096
    assert abs(during["bytes_used"] - before["bytes_used"] - 4_000_000) < slack
    assert during["peak_bytes_used"] >= during["bytes_used"] and during["bytes_limit"] > during["bytes_used"]
    del big
    gc.collect()
    after = xm.get_memory_info("xla:0")
    assert abs(during["bytes_used"] - after["bytes_used"] - 4_000_000) < slack
    assert after["peak_bytes_used"] >= during["bytes_used"]  # the peak remembers
    with pytest.raises(ValueError, match="not an xla device"):
        xm.get_memory_info("cpu")


def test_memory_info_counts_a_buffer_held_by_two_arrays_once(tx):
    """A graph of collectives wraps a process's buffers in global arrays over the replica mesh, and a shard is an
    array of its own: two jax arrays, one buffer. Both used to be counted."""
    import jax
    import numpy as np

    xm = tx.xm
    gc.collect()
    before = xm.get_memory_info()["bytes_used"]
    own = jax.device_put(np.ones((1000, 1000), np.float32), jax.devices()[0])  # 4 MB
    wrapper = jax.make_array_from_single_device_arrays(own.shape, own.sharding, [own])
    assert wrapper is not own and wrapper.addressable_data(0).unsafe_buffer_pointer() == own.unsafe_buffer_pointer()
    held = xm.get_memory_info()["bytes_used"] - before
    assert abs(held - 4_000_000) < 4096  # the slack of the test above


def test_utils_utils_helpers(tx, capsys):
    import torch_xla.utils.utils as xu

    assert xu.as_list(3) == [3] and xu.as_list((1, 2)) == (1, 2)
    assert xu.shape([[1, 2, 3], [4, 5, 6]]) == [2, 3] and xu.shape(7) == []
    with pytest.raises(AssertionError, match="ragged"):
        xu.shape([[1, 2], [3]])
    assert xu.flatten_nested_tuple((1, [2, (3, 4)], 5)) == (1, 2, 3, 4, 5)
    assert xu.list_copy_append([1], 2) == [1, 2]

    shared = torch.zeros(1)
    nested = {"a": [shared, (torch.ones(2), 3)], "b": shared, "c": {"d": "text"}}
    found = []
    xu.for_each_instance(nested, lambda v: isinstance(v, torch.Tensor), found.append)
    assert len(found) == 2 and found[0] is shared  # each object once, in order
    rewritten = xu.for_each_instance_rewrite(nested, lambda v: isinstance(v, torch.Tensor), lambda t: t.numel())
    assert rewritten == {"a": [1, [2, 3]], "b": 1, "c": {"d": "text"}}
    # Both walks meet the selected objects in the same order, dict keys before their values.
    walked, rewrote = [], []
    keyed = {"k1": {"k2": "v2"}, 7: ["v3", ("v4", 8.5)]}
    xu.for_each_instance(keyed, lambda v: isinstance(v, (int, float, str)), walked.append)
    xu.for_each_instance_rewrite(keyed, lambda v: isinstance(v, (int, float, str)), lambda v: rewrote.append(v) or v)
    assert walked == rewrote == ["k1", "k2", "v2", 7, "v3", "v4", 8.5]

    folder = xu.TmpFolder()
    name = folder.name
    assert os.path.isdir(name)
    del folder
    gc.collect()
    assert not os.path.exists(name)

    batches = list(xu.FnDataGenerator(lambda x: x.sum(1), 4, torch.ones, dims=[3], count=2))
    assert len(batches) == 2 and batches[0][0].shape == (4, 3) and batches[0][1].tolist() == [3.0] * 4
    assert xu.timed(lambda: 42, msg="took ") == 42
    assert capsys.readouterr().err.startswith("took ")
    with xu.TimedScope("scope ", printfn=print) as scope:
        scope.set_error("failed")
    assert capsys.readouterr().out == ""  # a failed scope prints nothing
    assert xu.parallel_work(2, lambda x: x * x, [1, 2, 3]) == [1, 4, 9]
    port, = xu.get_free_tcp_ports()
    assert 0 < port < 65536


def test_serialization_saves_each_tensor_beside_the_data(tx, tmp_path):
    import torch_xla.utils.serialization as xser

    device = tx.torch_xla.device()
    weight = torch.arange(6.0, device=device).reshape(2, 3)
    path = str(tmp_path / "ckpt.pt")
    xser.save({"w": weight, "pair": (weight + 1, "label"), "step": 7}, path)
    assert sorted(os.listdir(path + ".tensors")) == ["tensor_0.pt", "tensor_1.pt"]
    loaded = xser.load(path)
    assert loaded["step"] == 7 and loaded["pair"][1] == "label" and loaded["w"].device.type == "cpu"
    assert torch.equal(loaded["w"], torch.arange(6.0).reshape(2, 3))
    assert torch.equal(loaded["pair"][0], torch.arange(6.0).reshape(2, 3) + 1)


def test_xlac_debug_getters_and_runtime_answers(tx):
    torch_xla, xr = tx.torch_xla, tx.xr
    device = torch_xla.device()
    x = torch.randn(2, 3).to(device) + 1  # device data in: jax cannot fold the add away
    assert "aten::add" in torch_xla._XLAC._get_xla_tensors_text([x])
    assert " add(" in torch_xla._XLAC._get_xla_tensors_hlo([x])
    pending = torch_xla._XLAC._get_xla_tensor_debug_info(x)
    assert pending.startswith("XLATensor {\n") and "XLAData: None" in pending and "XLA Shape: f32[2,3]" in pending
    cached = xr.get_num_cached_compilation_graph()
    torch_xla.sync(wait=True)
    assert xr.get_num_cached_compilation_graph() == cached + 1  # the new graph is cached
    done = torch_xla._XLAC._get_xla_tensor_debug_info(x)
    assert "XLAData: None" not in done and "Data Shape: f32[2,3]" in done and "IR: None" in done
    assert torch_xla._XLAC._get_xla_tensor_debug_info(torch.ones(1)) == "Not a XLATensor\n"
    assert torch_xla._XLAC._xla_get_default_device() == "xla:0"
    assert torch_xla.real_devices() == [f"{xr.device_type()}:0"]
    assert torch_xla._XLAC._get_graph_hash([x + 1]) == torch_xla._XLAC._get_graph_hash([x + 1])


def test_xlac_element_type_buffer_pointer_and_revisions(tx):
    torch_xla = tx.torch_xla
    device = torch_xla.device()
    half = torch.ones(2, dtype=torch.float16).to(device) * 3
    assert torch_xla._XLAC._get_xla_tensor_shape_type(half) == "f16"
    assert torch_xla._XLAC._get_xla_tensor_shape_type(torch.arange(3, device=device)) == "s64"
    with pytest.raises(TypeError, match="expected an xla tensor"):
        torch_xla._XLAC._get_xla_tensor_shape_type(torch.ones(1))
    # A pending value is computed first; the address is its buffer's: the same while the value is kept,
    # another one for another value.
    pointer = torch_xla._XLAC._unsafe_buffer_pointer(half)
    assert pointer > 0 and "XLAData: None" not in torch_xla._XLAC._get_xla_tensor_debug_info(half)
    other = torch.zeros(4, device=device)
    assert torch_xla._XLAC._unsafe_buffer_pointer(half) == pointer != torch_xla._XLAC._unsafe_buffer_pointer(other)
    assert half.cpu().tolist() == [3.0, 3.0]
    revs = torch_xla._XLAC._get_git_revs()
    assert revs["xla"].startswith("xladev ") and revs["torch"] == torch.version.git_version


def test_send_cpu_data_to_device_and_the_arena(tx):
    xm, device = tx.xm, tx.torch_xla.device()
    leaf = torch.ones(2, 2, requires_grad=True)
    single = xm.send_cpu_data_to_device(leaf, device)
    assert len(single) == 1 and single[0].device == device and single[0].requires_grad and single[0].is_leaf
    assert torch.equal(single[0].cpu(), torch.ones(2, 2))
    nested = xm.send_cpu_data_to_device({"x": (torch.arange(3), "tag"), "n": 4}, device)
    assert nested["x"][0].device == device and nested["x"][0].cpu().tolist() == [0, 1, 2] and nested["x"][1] == "tag"
    with pytest.raises(TypeError, match="input_sharding takes a ShardingSpec"):
        xm.send_cpu_data_to_device(leaf, device, input_sharding=object())
    import torch_xla.distributed.spmd as xs

    with pytest.raises(RuntimeError, match="input_sharding needs SPMD mode"):  # this process is not in SPMD mode
        xm.send_cpu_data_to_device(leaf, device, input_sharding=xs.ShardingSpec(xs.Mesh([0], (1,)), (0, None)))

    calls = []

    def convert(tensors):
        calls.append(len(tensors))
        return [t * 10 for t in tensors]

    out = xm.ToXlaTensorArena(convert, lambda v: isinstance(v, torch.Tensor)).transform(
        [torch.tensor(1), {"k": torch.tensor(2)}])
    assert calls == [2] and out[0].item() == 10 and out[1]["k"].item() == 20  # one call for every tensor
    with pytest.raises(ValueError, match="returned 0 tensors for 1"):
        xm.ToXlaTensorArena(lambda ts: [], lambda v: isinstance(v, torch.Tensor)).transform([torch.tensor(1)])
    copies = tx.torch_xla._XLAC._xla_tensors_from_aten([torch.ones(3)], [str(device)])
    assert copies[0].device == device
    size = tx.torch_xla._XLAC._get_xla_tensor_dimension_size(copies[0], 0)
    assert size.device == device and size.dtype == torch.int32 and size.item() == 3


def test_mat_mul_precision_is_kept_and_checked(tx):
    import torch_xla.backends as backends

    assert backends.get_mat_mul_precision() == "highest"
    backends.set_mat_mul_precision("default")
    try:
        assert tx.torch_xla._XLAC._xla_get_mat_mul_precision() == "default"
        with pytest.raises(ValueError, match="Invalid precision: fast"):
            backends.set_mat_mul_precision("fast")
    finally:
        backends.set_mat_mul_precision("highest")
