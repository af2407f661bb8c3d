"""Healthy training runs get a healthy verdict from every input: no warning the user cannot act on.

Tiny healthy runs, each written as a user would: DistributedDataParallel and FSDP over two processes started by
`xladev.launch`, PyTorch/XLA's FSDPv2 over four SPMD devices (an unchanged torch_xla script under `xladev run`),
a model whose loss is `torch.compile`d, and a loop over an `xladev.DeviceLoader`. Each ends with a final print. Their one-time work (DDP's constructor broadcasting and reading its parameters, its bucket rebuild
in the second forward, the optimizer's first step, the final read) is set-up, not a per-step problem: the event
log, the metrics file, the PT_XLA_DEBUG log and all of them together say healthy.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.faults import runs
from xladev.report import load

STEPS = 12

DDP = textwrap.dedent(f"""
    import torch, torch.distributed as dist, xladev
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(rank):
        dist.init_process_group("xla", init_method="xla://")
        dev = xladev.device()
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(dev))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        for _ in range({STEPS}):
            x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
            opt.zero_grad()
            loss = ((model(x.to(dev)) - y.to(dev)) ** 2).mean()
            loss.backward()
            opt.step()
            xladev.mark_step()
        print("rank", rank, "loss", loss.item(), "weights", model.module[0].weight.sum().item())
        dist.destroy_process_group()

    if __name__ == "__main__":
        xladev.launch(train, nprocs=2)
""")

FSDP = DDP.replace("from torch.nn.parallel import DistributedDataParallel as DDP", "import xladev.fsdp as fsdp").replace(
    "model = DDP(", "model = fsdp.FSDP(").replace(', "weights", model.module[0].weight.sum().item()', "")

FSDP_V2 = textwrap.dedent(f"""
    import numpy as np, torch
    import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2

    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "tensor"))
    xs.set_global_mesh(mesh)
    dev = xm.xla_device()
    torch.manual_seed(0)
    model = FSDPv2(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range({STEPS}):
        x, y = torch.randn(8, 8, generator=g).to(dev), torch.randn(8, 1, generator=g).to(dev)
        xs.mark_sharding(x, mesh, ("fsdp", None))
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
    print("loss", loss.item())
""")

COMPILED = textwrap.dedent(f"""
    import torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.compile(lambda x, y: torch.nn.functional.cross_entropy(model(x), y), backend="xladev")
    g = torch.Generator().manual_seed(1)
    for _ in range({STEPS}):
        x, y = torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        loss = loss_fn(x.to(dev), y.to(dev))
        loss.backward()
        opt.step()
        xladev.mark_step()
    print("loss", loss.item())
""")

LOADER = textwrap.dedent(f"""
    import torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)) for _ in range({STEPS})]
    for x, y in xladev.DeviceLoader(batches, dev):  # it marks each step
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    print("loss", loss.item())
""")

SCRIPTS = {"ddp": DDP, "fsdp": FSDP, "fsdpv2": FSDP_V2, "compiled": COMPILED, "loader": LOADER}
LAUNCHED = ("ddp", "fsdp")  # two processes, each writing its own files (name.<rank>)
INPUTS = {"event log": ("run.jsonl",), "metrics file": ("metrics.txt",), "debug log": ("debug.txt",),
          "all together": ("run.jsonl", "metrics.txt", "debug.txt")}


@pytest.fixture(scope="module", params=list(SCRIPTS))
def run(request, tmp_path_factory):
    """(name, the output files of each process): one healthy run with every output on."""
    tmp = tmp_path_factory.mktemp(request.param)
    env = runs.environment(XLADEV_EVENT_LOG=str(tmp / "run.jsonl"), XLA_METRICS_FILE=str(tmp / "metrics.txt"),
                           PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(tmp / "debug.txt"))
    script = runs.write_script(tmp, SCRIPTS[request.param])
    args = [script]
    if request.param == "fsdpv2":  # an unchanged torch_xla script, over four CPU devices as PyTorch/XLA's tests run
        args, env["CPU_NUM_DEVICES"] = ["-m", "xladev_cli", "run", script], "4"
    done = runs.run(args, env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = ["0", "1"] if request.param in LAUNCHED else [None]
    return request.param, [{name: str(tmp / (name if rank is None else f"{name}.{rank}")) for name in
                            ("run.jsonl", "metrics.txt", "debug.txt")} for rank in ranks]


@pytest.mark.parametrize("kind", list(INPUTS))
def test_a_healthy_run_is_healthy_from_every_input(run, kind):
    name, processes = run
    for files in processes:
        report = load([files[part] for part in INPUTS[kind]])
        problems = [f"{f.severity} {f.rule}: {f.title}" for f in report.findings if f.severity != "info"]
        assert report.verdict() == "healthy", (name, kind, files, problems, [f.rule for f in report.findings])
        assert report.findings[0].rule in ("healthy", "compile-time")
