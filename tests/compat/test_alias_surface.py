"""The torch_xla alias's surface, in-process: PyTorch/XLA's signatures, single-replica answers, renames of
xladev's own objects, and an error naming every name it does not provide.

The `tx` fixture (conftest.py) puts the alias folder on sys.path for this module only (as `xladev run` would put
it), and drops every `torch_xla` module afterwards.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import types
from types import SimpleNamespace

import pytest
import torch

import xladev
import xladev.debug.metrics
import xladev.debug.profiler
from tests.report.helpers import fixture_path
from xladev.cli.run import ALIAS_DIR


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
    "xm.reduce_scatter": "reduce_type input scale scatter_dim shard_count groups output pin_layout",
    "xm.reduce_scatter_bucketized": ("reduce_type input_list scale scatter_dim shard_count groups output pin_layout "
                                     "bucket_cap_mb"),
    "xm.all_gather_bucketized": "input_list dim groups output pin_layout bucket_cap_mb",
    "xm.xla_rendezvous": "payload ordinals tag",
    "xm.save": "data file_or_path master_only global_master",
    "xm.master_print": "args fd local flush",
    "xm.rendezvous": "tag payload replicas",
    "xm.mesh_reduce": "tag data reduce_fn",
    "xm.is_master_ordinal": "local",
    "xm.get_ordinal": "defval",
    "xm.get_local_ordinal": "defval",
    "xm.xrt_world_size": "defval",
    "xm.set_rng_state": "seed device",
    "xm.optimization_barrier_": "tensors",
    "xr.initialize_cache": "path readonly",
    "xp.start_server": "port only_on_master",
    "xp.trace": ("service_addr logdir duration_ms num_tracing_attempts host_tracer_level device_tracer_level delay_ms "
                 "timeout_s interval_s"),
    "pl.ParallelLoader": ("cpu_loader devices batchdim batches_per_execution loader_prefetch_size device_prefetch_size "
                          "host_to_device_transfer_threads input_sharding"),
    "pl.MpDeviceLoader": "loader device kwargs",
    "xmp.spawn": "fn args nprocs join daemon start_method",
    "amp.autocast": "device enabled dtype cache_enabled",
    "amp.GradScaler": "init_scale growth_factor backoff_factor growth_interval enabled use_zero_grad",  # 2.8's
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
    # PyTorch/XLA's PJRT client names each device; only TPU devices carry coordinates.
    assert xr.global_runtime_device_attributes() == [{"name": name} for name in xm.xla_real_devices()]
    assert xr.runtime_device_attributes(device) == {} and xr.runtime_device_attributes("xla:0") == {}
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
    with pytest.raises(TypeError, match="input_sharding takes a ShardingSpec"):
        pl.MpDeviceLoader(batches, device, input_sharding=object())
    import torch_xla.distributed.spmd as xs

    with pytest.raises(RuntimeError, match="input_sharding needs SPMD mode"):  # this process is not in SPMD mode
        pl.MpDeviceLoader(batches, device, input_sharding=xs.ShardingSpec(xs.Mesh([0], (1,)), (0,)))

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
    assert not hasattr(xm, "xla_device_kind") and not hasattr(tx.torch_xla._XLAC, "_xla_step_marker")
    with pytest.raises(AttributeError, match=r"^torch_xla\._XLAC\._xla_step_marker is not supported by xladev: "
                                             r".*_get_xla_tensors_text.*torch_xla\.sync\(\)"):
        tx.torch_xla._XLAC._xla_step_marker
    with pytest.raises(ImportError, match=r"^torch_xla\.core\.xla_model\.send is not supported by xladev: "
                                          r".*collective_permute"):
        exec("from torch_xla.core.xla_model import send", {})
    with pytest.raises(ModuleNotFoundError, match=r"^torch_xla\.distributed\.xla_sharding is not supported by xladev: "
                                                  r"the old path of the SPMD API: use torch_xla\.distributed\.spmd"):
        exec("import torch_xla.distributed.xla_sharding", {})
    with pytest.raises(ImportError, match=r"^torch_xla\.stablehlo is not supported by xladev: "):
        exec("from torch_xla import stablehlo", {})
    with pytest.raises(AttributeError, match=r"^torch_xla\.runtime\.frobnicate is not available: .*docs/compat\.md"):
        tx.xr.frobnicate


def test_the_unsupported_table_names_only_what_the_alias_lacks(tx):
    for name in tx.private.UNSUPPORTED:
        assert tx.private.message(name).startswith(f"{name} is not supported by xladev: ")
        module, _, attr = name.rpartition(".")
        parent = sys.modules.get(module)
        # A name in a module the alias has must not exist there, unless it is a module the alias provides in
        # part (`torch_xla._XLAC`): its entry then advises on the names that module lacks.
        if parent is not None and not isinstance(vars(parent).get(attr), types.ModuleType):
            assert attr not in vars(parent), name


def test_metrics_compare_utils_reads_xladevs_and_pytorch_xlas_reports(tx):
    import torch_xla.debug.metrics_compare_utils as mcu

    fixture = fixture_path("healthy.metrics.txt").read_text()
    reports = fixture.split("[MetricsData; step=")[1:]  # one report per step, as PyTorch/XLA's file holds them
    points = mcu.get_data_points_from_metrics_reports(reports[:2])
    assert points["DeviceLockWait__TotalSamples"][0] == 2
    assert points["DeviceLockWait__Accumulator_sec"][0] == pytest.approx(14.812e-6)
    assert points["InputOutputAliasCount__Accumulator"][0] == 4.0
    assert all(len(values) == 2 for values in points.values())

    tx.met.clear_all()
    (torch.rand(3, 3).to("xla") * 2).cpu()  # an upload, a graph, a read
    ours = mcu.parse_metrics_report(tx.met.metrics_report())
    names = {key.split("__")[0] for key in ours}
    assert {"ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime", "UnwrapXlaData", "WrapXlaData",
            "DeviceLockWait", "CreateDataHandles"} <= names
    assert ours["TransferFromDeviceTime__TotalSamples"] == 1 and ours["InboundData__Accumulator_mb"] == 36e-6
    assert isinstance(mcu.parse_metrics_report(tx.met.metrics_report(), dehumanize=False)
                      ["InboundData__Accumulator_mb"], tuple)
    with pytest.raises(AttributeError, match="compare_metrics is not supported by xladev: .*xladev report A B"):
        mcu.compare_metrics


def test_eager_mode_is_xladevs_eager_debug_mode(tx):
    import torch_xla.experimental as xe

    assert not xe.is_eager_mode()
    tx.met.clear_all()
    with xe.eager_mode_context(True) as before:
        assert before is False and xe.is_eager_mode() and xladev.config.eager_debug_mode
        x = torch.ones(4, device="xla") * 3  # runs now, as its own graph
        assert tx.met.metric_data("EagerOpExecuteTime")[0] >= 1
        with tx.torch_xla.compile():  # a compiled region is traced as one graph even in eager mode
            y = torch.sin(x) + 1
        assert tx.met.metric_data("ExecuteTime")[0] == 1
    assert not xe.is_eager_mode() and y.cpu().tolist() == pytest.approx([float(torch.sin(torch.tensor(3.0))) + 1] * 4)
    with pytest.raises(AttributeError, match=r"^torch_xla\.experimental\.stablehlo_custom_call is not supported by "
                                             r"xladev: "):
        xe.stablehlo_custom_call


def test_utils_helpers_of_the_examples(tx, monkeypatch):
    import torch_xla.utils.utils as xu

    monkeypatch.setenv("XLADEV_TEST_FLAG", "yes")
    monkeypatch.setenv("XLADEV_TEST_NUMBER", "7")
    assert xu.getenv_as("XLADEV_TEST_FLAG", bool) is True and xu.getenv_as("XLADEV_TEST_NUMBER", int) == 7
    assert xu.getenv_as("XLADEV_TEST_UNSET", int, 3) == 3 and xu.check_env_flag("XLADEV_TEST_FLAG")
    data = (torch.zeros(2, 3), torch.zeros(2, dtype=torch.int64))
    samples = xu.SampleGenerator(data, sample_count=5)
    assert len(samples) == 5 and all(s is data for s in samples)
    tx.xr.set_device_type(tx.xr.device_type().lower())  # the running backend: accepted
    with pytest.raises(RuntimeError, match="PJRT_DEVICE=TPU"):
        tx.xr.set_device_type("TPU")


def test_env_var_names_are_pytorch_xlas_and_the_ones_xladev_reads_take_effect(tx, monkeypatch):
    import torch_xla.core.xla_env_vars as xenv

    assert (xenv.PJRT_DEVICE, xenv.CPU_NUM_DEVICES, xenv.WORLD_SIZE) == ("PJRT_DEVICE", "CPU_NUM_DEVICES",
                                                                         "XRT_SHARD_WORLD_SIZE")
    assert all(type(getattr(xenv, name)) is str for name in xenv.__all__)
    # A script sets the backend through the name before the runtime is asked for it.
    monkeypatch.setenv(xenv.PJRT_DEVICE, tx.xr.device_type())
    assert tx.xr.device_type() == os.environ["PJRT_DEVICE"]


def test_openxla_is_xladevs_torch_compile_backend_and_the_bridge_is_its_program(tx):
    import torch_xla.core.dynamo_bridge as bridge
    from torch._dynamo.backends.registry import lookup_backend

    from xladev.runtime.dynamo.dynamo_backend import xladev_backend

    assert lookup_backend("openxla") is xladev_backend
    before = tx.met.counter_value("DynamoExtractCompiledGraph") or 0
    f = torch.compile(lambda t: torch.sin(t) * 3, backend="openxla")
    x = torch.linspace(0, 1, 7)
    assert torch.allclose(f(x.to("xla")).cpu(), torch.sin(x) * 3, rtol=0, atol=8 * torch.finfo(torch.float32).eps)
    assert tx.met.counter_value("DynamoExtractCompiledGraph") == before + 1

    gm = torch.fx.symbolic_trace(lambda a, b: (torch.ops.aten.mul.Tensor(a, b),))
    run = bridge.extract_compiled_graph(gm, None)
    a = torch.arange(4.0)
    out = run(a.to("xla"), a.to("xla"))
    assert type(out) is tuple and out[0].cpu().tolist() == (a * a).tolist()

    # A module returning one tensor gets that tensor back, as from PyTorch/XLA's bridge (not its rows).
    import torch_xla._dynamo.dynamo_bridge as new_bridge

    class Scale(torch.nn.Module):
        def forward(self, t):
            return t * 3

    t = torch.arange(12.0).reshape(3, 4)
    out = new_bridge.extract_compiled_graph(torch.fx.symbolic_trace(Scale()), None)(t.to("xla"))
    assert isinstance(out, torch.Tensor) and out.cpu().tolist() == (t * 3).tolist()
