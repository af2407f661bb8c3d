"""The torch_xla alias's surface, in-process: PyTorch/XLA's signatures, single-replica answers, renames of
xladev's own objects, and an error naming every name it does not provide.

The alias folder is on sys.path for this module only (as `xladev run` would put it), and every `torch_xla`
module is dropped afterwards.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from types import SimpleNamespace

import pytest
import torch

import xladev
import xladev.debug.metrics
import xladev.debug.profiler
from xladev.cli.run import ALIAS_DIR


@pytest.fixture(scope="module")
def tx():
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("a real torch_xla is importable here; the alias is tested where it is not")
    sys.path.insert(0, ALIAS_DIR)
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        import torch_xla.debug.profiler as xp
        import torch_xla.distributed.parallel_loader as pl
        import torch_xla.distributed.xla_multiprocessing as xmp
        import torch_xla.runtime as xr
        from torch_xla import _xladev

        yield SimpleNamespace(torch_xla=torch_xla, xm=xm, met=met, xp=xp, pl=pl, xmp=xmp, xr=xr, private=_xladev)
    finally:
        sys.path.remove(ALIAS_DIR)
        for name in [m for m in sys.modules if m == "torch_xla" or m.startswith("torch_xla.")]:
            del sys.modules[name]
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "torch_xla._xladev"]


# Parameter names of PyTorch/XLA's functions (its torch_xla.py, core/xla_model.py, runtime.py,
# debug/profiler.py, distributed/*): a script passing any of them by keyword must run.
SIGNATURES = {
    "torch_xla.device": "index",
    "torch_xla.sync": "wait reset_scope",
    "torch_xla.compile": "f full_graph name max_different_graphs custom_compile_options",
    "torch_xla.manual_seed": "seed device",
    "torch_xla.launch": "fn args start_method debug_single_process",
    "xm.xla_device": "n devkind",
    "xm.get_xla_supported_devices": "devkind max_devices",
    "xm.mark_step": "wait reset_scope",
    "xm.wait_device_ops": "devices",
    "xm.optimizer_step": "optimizer barrier optimizer_args groups pin_layout",
    "xm.add_step_closure": "closure args run_async",
    "xm.all_reduce": "reduce_type inputs scale groups pin_layout",
    "xm.all_gather": "value dim groups output pin_layout",
    "xm.save": "data file_or_path master_only global_master",
    "xm.master_print": "args fd local flush",
    "xm.rendezvous": "tag payload replicas",
    "xm.mesh_reduce": "tag data reduce_fn",
    "xm.is_master_ordinal": "local",
    "xm.get_ordinal": "defval",
    "xm.get_local_ordinal": "defval",
    "xm.xrt_world_size": "defval",
    "xm.set_rng_state": "seed device",
    "xr.initialize_cache": "path readonly",
    "xp.start_server": "port only_on_master",
    "xp.trace": ("service_addr logdir duration_ms num_tracing_attempts host_tracer_level device_tracer_level delay_ms "
                 "timeout_s interval_s"),
    "pl.ParallelLoader": ("cpu_loader devices batchdim batches_per_execution loader_prefetch_size device_prefetch_size "
                          "host_to_device_transfer_threads input_sharding"),
    "pl.MpDeviceLoader": "loader device kwargs",
    "xmp.spawn": "fn args nprocs join daemon start_method",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signatures_are_pytorch_xlas(tx, name):
    module, attr = name.split(".")
    assert list(inspect.signature(getattr(getattr(tx, module), attr)).parameters) == SIGNATURES[name].split()


def test_metrics_and_profiler_are_xladevs_own(tx):
    # Renames, not copies: the objects are xladev's.
    for name in xladev.debug.metrics.__all__:
        assert getattr(tx.met, name) is getattr(xladev.debug.metrics, name), name
    for name in ("Trace", "StepTrace", "trace_me", "start_trace", "stop_trace"):
        assert getattr(tx.xp, name) is getattr(xladev.debug.profiler, name), name
    assert tx.xm.add_step_closure is xladev.add_step_closure
    assert issubclass(tx.pl.MpDeviceLoader, xladev.DeviceLoader)


def test_one_process_one_replica(tx):
    xm, xr = tx.xm, tx.xr
    device = tx.torch_xla.device()
    assert device == xladev.device() == xm.xla_device() and tx.torch_xla.devices() == xladev.devices()
    assert (xm.get_ordinal(), xm.get_local_ordinal(), xm.xrt_world_size(), xm.is_master_ordinal(local=False)) == (0, 0, 1, True)
    assert (xr.world_size(), xr.global_ordinal(), xr.local_ordinal(), xr.process_index()) == (1, 0, 0, 0)
    count = xladev.device_count()
    assert xr.global_runtime_device_count() == xr.addressable_device_count() == count
    assert xr.device_type() == xm.xla_device_hw(device) == xladev.config.pjrt_device
    assert xm.get_xla_supported_devices() == [f"xla:{i}" for i in range(count)]
    assert xm.get_xla_supported_devices(max_devices=1) == ["xla:0"] and xm.get_xla_supported_devices(1) == ["xla:0"]
    assert xm.xla_real_devices() == [f"{xladev.config.pjrt_device}:{i}" for i in range(count)]
    assert xm.is_xla_tensor(torch.ones(1, device=device)) and not xm.is_xla_tensor(torch.ones(1))
    assert tx.torch_xla.__version__.endswith(f"+xladev.{xladev.__version__}")


def test_collectives_over_one_replica(tx):
    xm = tx.xm
    t = torch.arange(4.0, device="xla")
    reduced = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5)
    # As PyTorch/XLA at world size 1: a copy of the tensor, a list as it is, and the scale not applied.
    assert reduced is not t and torch.equal(reduced.cpu(), t.cpu())
    grads = [torch.ones(2, device="xla")]
    assert xm.all_reduce(xm.REDUCE_SUM, grads, scale=0.5) is grads and grads[0].cpu().tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="unknown reduce_type 'avg'"):
        xm.all_reduce("avg", t)
    assert torch.equal(xm.all_gather(t).cpu(), t.cpu())
    assert xm.rendezvous("ready", b"x") == [b"x"]
    [gathered] = xm.mesh_reduce("acc", {"loss": t}, lambda values: values)
    assert gathered["loss"].device.type == "cpu" and torch.equal(gathered["loss"], torch.arange(4.0))
    assert xm.mesh_reduce("acc", 0.5, lambda values: sum(values) / len(values)) == 0.5


def test_save_writes_cpu_tensors_and_keeps_shared_ones_shared(tx, tmp_path):
    model = torch.nn.Linear(3, 2).to("xla")
    shared = torch.ones(2, device="xla")
    tx.xm.save({"model": model.state_dict(), "a": shared, "b": [shared]}, tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt")
    assert all(t.device.type == "cpu" for t in loaded["model"].values())
    assert hasattr(loaded["model"], "_metadata")  # load_state_dict's version information survives
    assert loaded["a"] is loaded["b"][0]
    assert torch.equal(loaded["model"]["weight"], model.weight.detach().cpu())


def test_compile_and_step_sync_before_and_after(tx):
    import torch_xla.debug.metrics as met

    def marks():
        return met.counter_value("MarkStep") or 0

    x = torch.ones(3, device="xla")
    before = marks()
    assert tx.torch_xla.compile(lambda t: t * 2)(x).cpu().tolist() == [2.0] * 3
    assert marks() == before + 2

    @tx.torch_xla.compile()
    def double(t):
        """Doubles."""
        return t * 2

    assert double.__name__ == "double" and double(x).cpu().tolist() == [2.0] * 3 and marks() == before + 4
    with tx.torch_xla.step():
        y = x + 1
    assert marks() == before + 6 and y.cpu().tolist() == [2.0] * 3
    with pytest.raises(KeyError):
        with tx.torch_xla.step():
            raise KeyError("in the step")
    assert marks() == before + 7  # a failed step leaves its ops pending: no barrier on the way out


def test_spawn_of_one_process_runs_here(tx):
    # One device (CPU_NUM_DEVICES unset): one process, this one, as PyTorch/XLA's spawn does with nprocs=1.
    assert tx.xmp.spawn(lambda index, a, b: (index, a + b), args=(1, 2)) == (0, 3)
    assert tx.xmp.spawn(lambda index: index, nprocs=1) == 0
    assert tx.torch_xla.launch(lambda index, a: (index, a), args=("x",)) == (0, "x")
    with pytest.raises(ValueError, match=r"launch: nprocs=0; at least one process is needed"):
        tx.xmp.spawn(print, nprocs=0)
    with pytest.raises(ValueError, match=r"start_method='fork' is not supported: jax's runtime cannot be forked"):
        tx.xmp.spawn(print, nprocs=2, start_method="fork")


def test_loaders_take_pytorch_xlas_arguments(tx):
    pl = tx.pl
    device = tx.torch_xla.device()
    batches = [(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(4)]
    loader = pl.MpDeviceLoader(batches, device, loader_prefetch_size=3, device_prefetch_size=4,
                               host_to_device_transfer_threads=2, batchdim=0)
    assert loader._prefetch == 3 and len(loader) == 4
    seen = [(x.device.type, int(y.cpu()[0])) for x, y in loader]
    assert seen == [("xla", 0), ("xla", 1), ("xla", 2), ("xla", 3)]
    with pytest.raises(TypeError, match="prefetch_size"):
        pl.MpDeviceLoader(batches, device, prefetch_size=3)
    with pytest.raises(ValueError, match="batches_per_execution=2"):
        pl.MpDeviceLoader(batches, device, batches_per_execution=2)
    with pytest.raises(ValueError, match="input_sharding"):
        pl.MpDeviceLoader(batches, device, input_sharding=object())

    per_device = pl.ParallelLoader(batches, [device]).per_device_loader(device)
    assert len(per_device) == 4 and iter(per_device) is per_device
    assert [int(y.cpu()[0]) for _, y in per_device] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="ParallelLoader over 2 devices"):
        pl.ParallelLoader(batches, ["xla:0", "xla:1"])


def test_an_unsupported_name_says_what_to_use(tx):
    xm = tx.xm
    with pytest.raises(AttributeError, match=r"^torch_xla\.core\.xla_model\.world_size is not supported by xladev: "
                                             r".*torch_xla\.runtime\.world_size\(\)"):
        xm.world_size()
    assert not hasattr(xm, "RateTracker") and not hasattr(tx.torch_xla, "_XLAC")
    with pytest.raises(ImportError, match=r"^torch_xla\.core\.xla_model\.send is not supported by xladev: "
                                          r".*collective_permute"):
        exec("from torch_xla.core.xla_model import send", {})
    with pytest.raises(ModuleNotFoundError, match=r"^torch_xla\.distributed\.xla_sharding is not supported by xladev: "
                                                  r"the old path of the SPMD API: use torch_xla\.distributed\.spmd"):
        exec("import torch_xla.distributed.xla_sharding", {})
    with pytest.raises(ImportError, match=r"^torch_xla\.amp is not supported by xladev: "):
        exec("from torch_xla import amp", {})
    with pytest.raises(AttributeError, match=r"^torch_xla\.runtime\.frobnicate is not available: .*docs/compat\.md"):
        tx.xr.frobnicate


def test_the_unsupported_table_names_only_what_the_alias_lacks(tx):
    for name in tx.private.UNSUPPORTED:
        assert tx.private.message(name).startswith(f"{name} is not supported by xladev: ")
        module, _, attr = name.rpartition(".")
        parent = sys.modules.get(module)
        if parent is not None:  # a name in a module the alias has must not exist there
            assert attr not in vars(parent), name
