"""The rest of the surface PyTorch/XLA's test_operations.py imports, through the alias, in-process on the real
device: `xb.Op` operations run by `xla_op_registry.register`, DLPack exchange, the model comparator,
`torch_xla.core.functions`' differentiable collectives, `apply_xla_patch_to_nn_linear` and custom_kernel's
`repeat_with_fixed_output_size`. Values are checked
against eager CPU torch computing the same thing."""

from __future__ import annotations

import importlib

import pytest
import torch


@pytest.fixture(scope="module")
def mods(tx):
    names = {"xb": "torch_xla.core.xla_builder", "xor": "torch_xla.core.xla_op_registry",
             "dlpack": "torch_xla.utils.dlpack", "mc": "torch_xla.debug.model_comparator",
             "xf": "torch_xla.core.functions", "fsdp_utils": "torch_xla.distributed.fsdp.utils",
             "dp": "torch_xla.distributed.data_parallel"}
    return type("Mods", (), {key: importlib.import_module(name) for key, name in names.items()})


def test_an_op_of_builder_operations_runs_in_the_graph(tx, mods):
    xb, device = mods.xb, tx.torch_xla.device()
    op = mods.xor.register("scaled_sum", lambda a, b, scale=1.0: (a + b) * xb.Op.scalar(a.builder(), scale))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    got = op(a.to(device), b.to(device), scale=0.5)
    assert got.device.type == "xla" and torch.equal(got.cpu(), (a + b) * 0.5)  # two float32 roundings, as eager


def test_a_tuple_op_returns_a_tensor_per_element_with_its_type(tx, mods):
    xb, device = mods.xb, tx.torch_xla.device()
    op = mods.xor.register("mixed", lambda a: xb.Op.tuple((a, a.cast(xb.Type.BF16), a.shape().sizes and a.exp())))
    a = torch.randn(2, 3)
    same, cast, exp = op(a.to(device))
    assert (same.dtype, cast.dtype, exp.dtype) == (torch.float32, torch.bfloat16, torch.float32)
    assert torch.equal(same.cpu(), a) and torch.equal(cast.cpu(), a.to(torch.bfloat16))
    torch.testing.assert_close(exp.cpu(), a.exp())


def test_conditional_and_while_run_as_xla_control_flow(tx, mods):
    xb, device = mods.xb, tx.torch_xla.device()

    def choose(k, a, b, k0=None):
        taken = k > xb.Op.scalar(k.builder(), k0, dtype=k.shape().dtype)
        return taken.mkconditional((a, b), lambda x, y: x + y, lambda x, y: x - y)

    def repeat(a, b, limit=None):
        one = xb.Op.scalar(a.builder(), 1, dtype=xb.Type.S32)
        loop = xb.Op.mkwhile((xb.Op.zero(a.builder(), dtype=xb.Type.S32), a, b),
                             lambda i, x, y: i < xb.Op.scalar(i.builder(), limit, dtype=xb.Type.S32),
                             lambda i, x, y: xb.Op.tuple((i + one, x + y, y)))
        return loop.get_tuple_element(1)

    choose_op, repeat_op = mods.xor.register("choose", choose), mods.xor.register("repeat", repeat)
    k, a, b = torch.tensor(0.2), torch.randn(2, 2), torch.randn(2, 2)
    assert torch.equal(choose_op(k.to(device), a.to(device), b.to(device), k0=0.1).cpu(), a + b)
    assert torch.equal(choose_op(k.to(device), a.to(device), b.to(device), k0=0.9).cpu(), a - b)
    want = a.clone()
    for _ in range(5):
        want = want + b
    assert torch.equal(repeat_op(a.to(device), b.to(device), limit=5).cpu(), want)  # the same additions in order


def test_triangular_solve_and_the_type_tables(tx, mods):
    xb, device = mods.xb, tx.torch_xla.device()
    op = mods.xor.register("solve", lambda b, A, lower=False: A.triangualr_solve(b, True, lower, False, False))
    A = torch.randn(3, 3).triu() + 3 * torch.eye(3)
    B = torch.randn(3, 2)
    got = op(B.to(device), A.to(device)).cpu()
    # A back substitution of 3 rows: each element a handful of float32 operations on values of A's and B's scale.
    torch.testing.assert_close(got, torch.linalg.solve_triangular(A, B, upper=True), rtol=1e-5, atol=1e-5)
    for name, dtype in xb._XLA_PT_TYPE_MAP.items():
        assert xb.Op.from_torch_type(dtype) == name and xb.Op.to_torch_type(name) == dtype
    assert xb.Op.to_torch_type(None) == torch.float32 and xb.Type.BF16 == "bf16"


def test_building_an_xla_computation_object_is_refused_with_the_way_to_write_one(tx, mods):
    with pytest.raises(AttributeError, match="a computation is a jax function here"):
        mods.xb.create_computation
    op = mods.xor.register("built", lambda a: a.build("x"))
    with pytest.raises(Exception, match="xb.call_jax"):
        op(torch.ones(2).to(tx.torch_xla.device()))


def test_dlpack_shares_values_both_ways(tx, mods):
    device = tx.torch_xla.device()
    t = torch.arange(6.0).reshape(2, 3).to(device) * 2
    assert torch.equal(torch.utils.dlpack.from_dlpack(mods.dlpack.to_dlpack(t)), torch.arange(6.0).reshape(2, 3) * 2)
    assert torch.equal(torch.utils.dlpack.from_dlpack(mods.dlpack.to_dlpack(t[:, 1])), torch.tensor([2.0, 8.0]))
    back = mods.dlpack.from_dlpack(torch.full((3,), 5, dtype=torch.int32))
    assert back.device.type == "xla" and back.dtype == torch.int32
    assert torch.equal((back + 1).cpu(), torch.full((3,), 6, dtype=torch.int32))
    with pytest.raises(TypeError, match="to_dlpack needs a tensor on an xla device"):
        mods.dlpack.to_dlpack(torch.ones(2))


def test_model_comparator_finds_the_layer_that_differs(tx, mods, tmp_path):
    mc, device = mods.mc, tx.torch_xla.device()
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    for folder, (model, data) in (("cpu", (layer, x)), ("xla", (torch.nn.Linear(4, 3).to(device), x.to(device)))):
        if folder == "xla":
            model.load_state_dict(layer.state_dict())
        mc.configure(str(tmp_path / folder))
        (tmp_path / folder).mkdir()
        out = mc.save("linear", model(data))
        mc.save("relu", torch.relu(out))
        mc.save("relu", torch.relu(out) * (2 if folder == "xla" else 1), step=3)  # differs, in a step folder
    report = mc.compare(str(tmp_path / "cpu"), str(tmp_path / "xla"), rtol=1e-4, atol=1e-4)
    assert 'Changes in saved tensor "relu" with id=0 at step=3' in report
    assert report.count("Changes in saved tensor") == 1  # the layer itself agrees within the tolerance
    (tmp_path / "xla" / "extra.0").write_bytes((tmp_path / "xla" / "linear.0").read_bytes())
    assert "Mismatch: extra.0 not in" in mc.compare(str(tmp_path / "cpu"), str(tmp_path / "xla"), 1e-4, 1e-4)
    mc.configure(None)
    assert mc.save("nowhere", out) is out  # no folder: nothing written


def test_differentiable_collectives_are_the_identity_on_one_replica(tx, mods):
    device = tx.torch_xla.device()
    x = torch.randn(3, 2, device=device, requires_grad=True)
    y = mods.xf.all_reduce(tx.xm.REDUCE_SUM, x, scale=0.5) * 3 + mods.xf.all_gather(x, dim=0)
    y.sum().backward()
    # One replica: all_reduce is a copy (as PyTorch/XLA's, which skips the collective and its scale then), and so
    # is all_gather: y = 3x + x.
    torch.testing.assert_close(y.cpu(), 4 * x.detach().cpu())
    torch.testing.assert_close(x.grad.cpu(), torch.full((3, 2), 4.0))
    with pytest.raises(RuntimeError, match="only xm.REDUCE_SUM is differentiable"):
        mods.xf.all_reduce(tx.xm.REDUCE_MAX, x).sum().backward()


def test_the_patched_linear_trains_as_nn_linear(tx, mods):
    device = tx.torch_xla.device()
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    patched = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    patched.load_state_dict(plain.state_dict())
    patched.to(device)
    assert mods.fsdp_utils.apply_xla_patch_to_nn_linear(patched) is patched
    assert all(hasattr(m, "_nn_linear_forward_original") for m in patched if isinstance(m, torch.nn.Linear))
    x = torch.randn(6, 4)
    plain(x).square().sum().backward()
    patched(x.to(device)).square().sum().backward()
    for a, b in zip(plain.parameters(), patched.parameters()):
        # Sums of at most 8 products of values near 1: a few float32 roundings, as eager's own order differs.
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)


def test_the_old_data_parallel_imports_and_says_what_to_use(tx, mods):
    with pytest.raises(AttributeError, match="one process per device"):
        mods.dp.DataParallel(lambda: torch.nn.Linear(2, 2), device_ids=["xla:0"])


@pytest.mark.parametrize("length", [0, 7, 20, 45])
def test_repeat_with_fixed_output_size_is_repeat_interleave_cut_or_padded(tx, length):
    from torch_xla.experimental.custom_kernel import repeat_with_fixed_output_size

    device = tx.torch_xla.device()
    values = torch.arange(10, dtype=torch.int32) * 3
    repeats = torch.tensor([0, 1, 2, 0, 4, 0, 6, 7, 8, 0])  # 28 in all
    whole = torch.repeat_interleave(values, repeats)
    want = whole[:length] if length <= len(whole) else torch.cat(
        [whole, values[-1].repeat(length - len(whole))])  # past the blocks: the last element
    tx.met.clear_all()
    got = repeat_with_fixed_output_size(values.to(device), repeats.to(device), length)
    assert torch.equal(got.cpu(), want)
    assert not [name for name in tx.met.counter_names() if name.startswith("aten::")]  # no CPU fallback
