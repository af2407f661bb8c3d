"""Several local devices: `CPU_NUM_DEVICES=N` gives xla:0..N-1, each device's values live on it, and ops
across devices fail as in eager PyTorch.

One child process (a device count is fixed when jax starts) checks everything and prints what it saw as
JSON; the assertions are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import json, torch, xladev
    import xladev.debug.metrics as met

    out = {"devices": [str(d) for d in xladev.devices()], "count": torch.xla.device_count()}

    def where(t):  # the jax device index that holds a synced tensor's value
        (device,) = t._st.value.array.devices()
        return device.id

    # Independent pending values on every device, synced by one barrier: one graph per device, and each
    # value on its own device.
    made = [torch.arange(4.0, device=f"xla:{i}") * (i + 2) + 1 for i in range(3)]
    xladev.mark_step()
    out["values"] = [t.tolist() for t in made]
    out["homes"] = [where(t) for t in made]
    out["executions"] = met.metric_data("ExecuteTime")[0]

    # The same graph on two devices is two executables (one per device), each cached afterwards.
    compiles = met.metric_data("CompileTime")[0]
    for _ in range(2):
        pair = [torch.ones(3, device=f"xla:{i}") * 5.0 for i in (0, 1)]
        xladev.mark_step()
    out["same_graph_compiles"] = met.metric_data("CompileTime")[0] - compiles
    out["pair_homes"] = [where(t) for t in pair]

    # Moving between devices, and a module on xla:2.
    a = torch.randn(5, device="xla:1")
    b = a.to("xla:2") * 2
    out["moved"] = [str(b.device), where(b) if xladev.mark_step() is None else None,
                    torch.allclose(b.cpu(), a.cpu() * 2)]
    layer = torch.nn.Linear(3, 2).to("xla:2")
    y = layer(torch.ones(1, 3, device="xla:2"))
    out["module"] = [str(y.device), list(y.shape)]

    # Ops across devices: each error as eager PyTorch's TensorIterator words it.
    def error(fn):
        try:
            fn()
        except RuntimeError as exc:
            return str(exc)
        return None

    x0, x1 = torch.ones(2, 2, device="xla:0"), torch.ones(2, 2, device="xla:1")
    out["errors"] = {
        "add": error(lambda: x0 + x1),
        "matmul": error(lambda: x0 @ x1),
        "inplace": error(lambda: x0.add_(x1)),
        "cpu": error(lambda: x0 + torch.ones(2, 2)),
    }
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def seen() -> dict:
    env = dict(os.environ, CPU_NUM_DEVICES="3", PJRT_DEVICE="CPU")
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_cpu_num_devices_gives_that_many_devices(seen):
    assert seen["devices"] == ["xla:0", "xla:1", "xla:2"]
    assert seen["count"] == 3


def test_each_device_computes_its_own_values(seen):
    assert seen["values"] == [[(i + 2) * k + 1.0 for k in range(4)] for i in range(3)]
    assert seen["homes"] == [0, 1, 2]
    assert seen["executions"] == 3  # one barrier, one graph per device


def test_the_same_graph_compiles_once_per_device(seen):
    assert seen["same_graph_compiles"] == 2
    assert seen["pair_homes"] == [0, 1]


def test_moves_and_modules_land_on_the_device_asked(seen):
    assert seen["moved"] == ["xla:2", 2, True]
    assert seen["module"] == ["xla:2", [1, 2]]


def test_ops_across_devices_fail_as_in_eager_pytorch(seen):
    errors = seen["errors"]
    expected = "Expected all tensors to be on the same device, but found at least two devices, {} and {}!"
    assert errors["add"] == expected.format("xla:0", "xla:1")
    assert errors["matmul"] == expected.format("xla:0", "xla:1")
    assert errors["inplace"] == expected.format("xla:0", "xla:1")
    assert errors["cpu"] == expected.format("xla:0", "cpu")


def test_a_bad_device_count_names_the_variable():
    env = dict(os.environ, CPU_NUM_DEVICES="two")
    done = subprocess.run([sys.executable, "-c", "import torch, xladev; xladev.devices()"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "CPU_NUM_DEVICES='two' is not valid" in done.stderr and "Traceback" not in done.stderr
