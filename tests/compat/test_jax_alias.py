"""The alias's jax and Pallas names: `torch_xla.core.xla_builder.call_jax`, `torch_xla.experimental.custom_kernel`.

In-process through the alias (as `xladev run` imports it), and once as a real `xladev run` of a script written
for PyTorch/XLA, with its metrics file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

jnp = pytest.importorskip("jax.numpy")


def test_call_jax_and_its_cache_count(tx):
    import torch_xla.core.xla_builder as xb

    assert tx.torch_xla.core.xla_builder is xb
    xb._JAX_TO_XLA_COMPUTATION_CACHE.clear()
    a = torch.ones(3, 3, device="xla")

    def f(x, y):
        return x + jnp.sin(y)

    out = xb.call_jax(f, (a, a), {}, "my_test")
    torch.testing.assert_close(out.cpu(), torch.sin(torch.ones(3, 3)) + 1, rtol=1e-6, atol=1e-6)
    xb.call_jax(f, (a, a))
    xb.call_jax(f, (torch.ones(2, 2, device="xla"),) * 2)  # another shape: traced again
    assert xb._jax_to_xla_computation_cache_elements() == 2


def test_builder_names_not_provided_say_what_is(tx):
    import torch_xla.core.xla_builder as xb

    # xb.Op is provided (tests/compat/test_alias_builder_tools.py); an XLA computation object of one's own is not.
    with pytest.raises(AttributeError, match=r"^torch_xla\.core\.xla_builder\.create_computation is not supported "
                                             r"by xladev: .*a computation is a jax function here \(xb\.call_jax\)"):
        xb.create_computation


def test_custom_kernel_runs_pallas_and_flash_attention(tx):
    import jax
    from jax.experimental import pallas as pl

    from torch_xla.experimental import custom_kernel

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...]

    @jax.jit
    def multiply(x, y):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    x, y = torch.randn(16), torch.randn(16)
    pt_kernel = custom_kernel.make_kernel_from_pallas(multiply, lambda a, b: [(a.shape, a.dtype)])
    assert torch.equal(pt_kernel(x.to("xla"), y.to("xla")).cpu(), x * y)

    q = torch.randn(1, 2, 8, 4)
    out = custom_kernel.flash_attention(q.to("xla"), q.to("xla"), q.to("xla"), sm_scale=0.5)
    expected = torch.softmax(q @ q.transpose(-2, -1) * 0.5, dim=-1) @ q
    torch.testing.assert_close(out.cpu(), expected, rtol=2e-5, atol=2e-5)
    assert custom_kernel.convert_torch_dtype_to_jax(torch.bfloat16) == jnp.bfloat16
    custom_kernel.jax_import_guard()  # nothing to do, and no error


def test_tpu_only_kernels_say_what_is_provided(tx):
    from torch_xla.experimental import custom_kernel

    with pytest.raises(AttributeError, match=r"^torch_xla\.experimental\.custom_kernel\.paged_attention is not "
                                             r"supported by xladev: PyTorch/XLA's TPU-only kernels .* "
                                             r"make_kernel_from_pallas runs any Pallas kernel"):
        custom_kernel.paged_attention
    with pytest.raises(ImportError, match=r"custom_kernel\.gmm is not supported by xladev"):
        from torch_xla.experimental.custom_kernel import gmm  # noqa: F401
    from torch_xla._internal import tpu

    with pytest.raises(EnvironmentError, match="Failed to get TPU metadata"):
        tpu.version()


SCRIPT = """\
import torch
import torch_xla
import torch_xla.core.xla_builder as xb
import torch_xla.debug.metrics as met
from torch_xla.experimental.custom_kernel import flash_attention

def gelu_jax(x):
    import jax
    return jax.nn.gelu(x)

device = torch_xla.device()
torch.manual_seed(0)
w = torch.randn(8, 8, device=device, requires_grad=True)
for step in range(3):
    x = torch.randn(2, 2, 4, 8).to(device)
    h = xb.call_jax(gelu_jax, (x @ w,))
    loss = flash_attention(h, h, h, causal=True).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
    w.grad = None
    torch_xla.sync()
print("loss", float(loss), "compiles", met.counter_value("UncachedCompile"), "calls", met.counter_value("xla::call_jax"))
"""


def test_a_pytorch_xla_script_with_jax_calls_runs_under_xladev_run(tmp_path):
    (tmp_path / "train_jax.py").write_text(SCRIPT)
    launcher = Path(sys.executable).parent / "xladev"
    command = [str(launcher), "run"] if launcher.exists() else [sys.executable, "-m", "xladev.cli.main", "run"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PT_XLA_", "XLA_", "XLADEV_"))}
    env.pop("PYTHONPATH", None)
    env["XLA_METRICS_FILE"] = str(tmp_path / "metrics.txt")
    result = subprocess.run([*command, "train_jax.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    words = result.stdout.split()
    # Step 1 compiles the step's graph, step 2 the graph whose weights are device data; step 3 reuses it.
    assert words[0] == "loss" and words[3] == "2", result.stdout
    assert words[5] == "12"  # per step: gelu and attention forward, their two backward nodes
    metrics = (tmp_path / "metrics.txt").read_text()
    assert "Counter: xla::call_jax\n  Value: 12" in metrics
