"""FSDP and ZeRO-1 over 2 real processes (`xladev run` of fsdp_job.py, torch_xla.launch, CPU_NUM_DEVICES=2).

Each case trains the model of fsdp_models.py for 3 steps, each process on half of every batch, and must
- train like eager CPU on the whole batch, within the float32 bounds of tests/parity_bounds.py (losses step by step,
  and the weights consolidated from the ranks' sharded checkpoints);
- run every all-gather and reduce-scatter inside the step's one graph;
- hold half of each parameter per process (FSDP) or half of the optimizer's state (ZeRO-1), in the device's live
  buffers (xladev's memory_info: the sum of the live arrays on the CPU device).
Then the test process (one process, world size 1) loads the job's files and must refuse them clearly.
"""

from __future__ import annotations

import functools
import glob
import json
import math
import sys

import pytest
import torch

from tests.distributed import fsdp_models as M
from tests.distributed.harness import REPO, run_job
from tests.parity_bounds import (
    GRAD_REL, assert_adam_params_close, assert_sgd_params_close, gradient_scale, loss_rtol,
)

SCRIPT = REPO / "tests" / "distributed" / "fsdp_job.py"
WORLD = 2
# A flattened shard is padded to a multiple of world size × 128 elements (PyTorch/XLA's _shard_size_multiple).
MULTIPLE = 128
U_BF16 = 2.0 ** -8
# The scalar buffers alive besides a model's (the RNG key, Adam's step counts, graph constants): a few dozen.
SCALARS = 256


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp_job")
    done = run_job([sys.executable, "-m", "xladev.cli.main", "run", str(SCRIPT), str(out)],
                   {"CPU_NUM_DEVICES": str(WORLD), "XLADEV_DIST_TIMEOUT": "120"}, timeout=600)
    assert done.returncode == 0, done.output[-6000:]
    return out


def _result(out, case: str) -> list[dict]:
    return [json.loads((out / f"{case}.rank{rank}.json").read_text()) for rank in range(WORLD)]


def _consolidated(out, case: str) -> dict:
    from xladev.fsdp import consolidate_sharded_model_checkpoints

    full, _ = consolidate_sharded_model_checkpoints(str(out / case), "_rank-*-of-*.pth", save_model=False)
    return full


def _names(optimizer: torch.optim.Optimizer) -> dict[int, str]:
    """id(parameter) -> name for the reference optimizer's parameters (in the model's order)."""
    return {id(p): n for p, (n, _) in zip(optimizer.param_groups[0]["params"], M.build().named_parameters())}


def _param_count(name: str) -> int:
    return dict(M.build().named_parameters())[name].numel()


# ---- FSDP trains like eager CPU on the whole batch ---------------------------------------------------------------
@pytest.mark.parametrize("case", ["nested", "flat", "dim0"])
def test_fsdp_trains_like_eager_cpu_on_the_whole_batch(job, case):
    ranks = _result(job, case)
    make = M.adam if case == "dim0" else M.sgd
    ref = M.reference(make)
    want, optimizer = ref.state, ref.optimizer
    assert ranks[0]["losses"] == ranks[1]["losses"]  # the global mean, read on each rank
    torch.testing.assert_close(ranks[0]["losses"], ref.losses, rtol=loss_rtol(), atol=0)
    full = _consolidated(job, case)
    assert full.keys() == want.keys()
    params = {n: full[n] for n, _ in M.build().named_parameters()}
    if case == "dim0":
        assert_adam_params_close(params, {n: want[n] for n in params}, optimizer, _names(optimizer), M.STEPS)
    else:
        assert_sgd_params_close(params, {n: want[n] for n in params}, optimizer, gradient_scale(ref.grads), M.STEPS)
    for name in want.keys() - params.keys():  # buffers: rank 0's, untouched by training
        assert torch.equal(full[name], want[name]), name


def test_clip_grad_norm_sees_the_whole_models_gradient_and_optimizer_step_is_refused(job):
    ref = M.reference()
    model = M.build()
    model.load_state_dict(ref.state)  # the trained weights
    x, y = M.batches(1)[0]
    M.loss_fn(model(x), y).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    for rank in _result(job, "nested"):
        two, most = rank["grad_norms"]
        assert two == pytest.approx(float(grads.norm()), rel=loss_rtol())
        assert most == pytest.approx(float(grads.abs().max()), rel=loss_rtol())
        assert rank["optimizer_step"] == ("reduce_gradients (xm.optimizer_step): the optimizer steps FSDP shards, "
                                          "whose gradients FSDP has already reduce-scattered; call optimizer.step() "
                                          "instead")


def test_flattened_shards_hold_each_module_in_one_vector(job):
    """size_based_auto_wrap_policy(min_num_params=1000) wraps `inp` and each block's `fc` (over 1000 parameters,
    checkpointed by auto_wrapper_callable); the rest (the norms, the head) is the root's: one shard per module."""
    shards = _result(job, "flat")[0]["shards"]
    held = {"inp": 32 * 64 + 64, "fc": 64 * 64 + 64, "root": 2 * 2 * 64 + 64 * 8 + 8}
    sizes = sorted(math.ceil(n / (WORLD * MULTIPLE)) * MULTIPLE for n in (held["inp"], held["fc"], held["fc"],
                                                                           held["root"]))
    assert sorted(s[0] for s in shards.values()) == sizes
    assert all(name.endswith("flat_param_0") for name in shards)


# ---- 1/N of the parameters per process -----------------------------------------------------------------------
def test_each_process_holds_half_of_every_parameter(job):
    for rank in _result(job, "nested"):
        names = [n for n, _ in M.build().named_parameters()]
        expected = sorted(math.ceil(_param_count(n) / (WORLD * MULTIPLE)) * MULTIPLE for n in names)
        assert sorted(s[0] for s in rank["shards"].values()) == expected
        # Wrapping uploads the shards and the buffers, nothing else but the RNG key (8 bytes).
        assert rank["shard_bytes"] + rank["buffer_bytes"] <= rank["wrapped_bytes"] < \
            rank["shard_bytes"] + rank["buffer_bytes"] + SCALARS
        # After training: the shards, their momentum and the buffers, and scalars. No live buffer is as large as a
        # full 64×64 weight (4096 elements): each process holds 2048 of them.
        kept = rank["shard_bytes"] + rank["momentum_bytes"] + rank["buffer_bytes"]
        assert kept <= rank["trained_bytes"] < kept + SCALARS
        assert rank["largest_live"] == 64 * 64 // WORLD
    dim0 = _result(job, "dim0")[0]["shards"]
    assert sorted(map(tuple, dim0.values())) == sorted(
        [(32, 32), (32,), (4, 64), (4,)] + [(32, 64), (32,), (32,), (32,)] * 2)


# ---- inside the step's graph ----------------------------------------------------------------------------------
def test_every_collective_runs_inside_the_steps_one_graph(job):
    # Blocks are inner FSDP modules: their 4 parameters are gathered in the forward and again in the backward
    # (reshard_after_forward); the root's 4 once (disable_reshard_on_root). Every parameter's gradient is
    # reduce-scattered once.
    inner, root = 2 * 4, 4
    expected = {
        "nested": (2 * inner + root, inner + root),
        "bf16": (2 * inner + root, inner + root),
        "flat": (2 * 3 + 1, 4),  # three inner flat vectors (inp, two fc), the root's one
        # two micro-batches: the first (no_sync) gathers all and regathers the inner in its backward, the second
        # regathers the inner in its backward only (kept gathered by no_sync, freed after its forward)
        "dim0": (root + inner + inner + inner, inner + root),
        "zero1": (12, 12),  # ZeRO-1: each gradient reduce-scattered, each parameter gathered after the step
    }
    for case, (gathers, scatters) in expected.items():
        for rank in _result(job, case):
            for step in rank["per_step"]:
                assert step == {"xla::all_gather": gathers, "xla::reduce_scatter": scatters, "executions": 1}, case


# ---- compute_dtype ----------------------------------------------------------------------------------------------
def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())


def test_compute_dtype_bfloat16_trains_like_eager_mixed_precision(job):
    """bfloat16 has no float32 bound. As tests/models/tolerances.py's rule 3, xla must be no farther from the
    float64 truth than 4 times eager CPU's own bfloat16 run (the same recipe: bfloat16 copies of the float32 weights
    for each step's forward and backward), plus a floor: for the weights, the float32 bound of
    assert_sgd_params_close; for a loss, what one bfloat16 rounding of the outputs can move it by
    (2·u_b·mean(|o − y|·|o|) for the mean squared error; a loss is one number, too few for eager's error alone to
    measure the noise of a bfloat16 run)."""
    ranks = _result(job, "bf16")
    for rank in ranks:
        assert rank["output_dtype"] == "torch.bfloat16" and rank["full_dtypes"] == ["torch.bfloat16"]
        assert rank["shard_dtypes"] == ["torch.float32"] and rank["grad_dtypes"] == ["torch.float32"]
        assert rank["buffer_dtypes"] == ["torch.bfloat16"]
    exact = M.reference(dtype=torch.float64)
    eager_losses, eager = M.reference_mixed(torch.bfloat16)
    for have, low, truth, scale in zip(ranks[0]["losses"], eager_losses, exact.losses, exact.output_scales):
        assert abs(have - truth) <= 4 * abs(low - truth) + 2 * U_BF16 * scale + loss_rtol() * abs(truth)
    # The float32 bound of assert_sgd_params_close: each step's gradient error, carried by momentum.
    floor = 2 * M.STEPS * M.LR * GRAD_REL * gradient_scale(exact.grads) / (1 - M.MOMENTUM)
    full = _consolidated(job, "bf16")
    for name, _ in M.build().named_parameters():
        truth = exact.state[name]
        assert _rms(full[name] - truth) <= 4 * _rms(eager[name] - truth) + floor, name


# ---- ZeRO-1 -------------------------------------------------------------------------------------------------------
def test_zero1_trains_like_eager_cpu_with_clipping_and_holds_half_the_optimizer_state(job):
    ranks = _result(job, "zero1")
    ref = M.reference(M.adam, clip=M.CLIP)
    want, optimizer = ref.state, ref.optimizer
    torch.testing.assert_close(ranks[0]["losses"], ref.losses, rtol=loss_rtol(), atol=0)
    assert ranks[0]["params"] == ranks[1]["params"]  # every process holds the whole, identical model
    params = {n: torch.tensor(v).view(want[n].shape) for n, v in ranks[0]["params"].items()}
    assert_adam_params_close(params, {n: want[n] for n in params}, optimizer, _names(optimizer), M.STEPS)
    assert ranks[0]["grad_norm"] == pytest.approx(ref.norms[-1], rel=loss_rtol())
    full_bytes = sum(p.numel() * 4 for p in M.build().parameters())
    for rank in ranks:
        # Adam's two moments and the float32 master copy, each of half of every parameter (every row count of
        # this model is even, so nothing is padded); the full model alone would need twice that state.
        assert rank["state_bytes"] == 2 * full_bytes // WORLD and rank["master_bytes"] == full_bytes // WORLD
        kept = rank["state_bytes"] + rank["master_bytes"]
        assert kept <= rank["trained_bytes"] < kept + SCALARS
        assert rank["reloaded_state_equal"]


# ---- the job's files, refused clearly where they do not fit --------------------------------------------------
def test_a_sharded_checkpoint_of_another_world_size_is_refused_by_name(job):
    import xladev.fsdp as fsdp

    model = fsdp.FSDP(M.build(), auto_wrap_policy=functools.partial(fsdp.transformer_auto_wrap_policy,
                                                                    transformer_layer_cls={M.Block}))
    saved = torch.load(glob.glob(str(job / "nested_rank-00000000-*.pth"))[0], weights_only=False)
    with pytest.raises(fsdp.ShardedCheckpointError, match=r"has shape \[1024\], this process's \[2048\] \(rank 0 "
                                                          r"of 1\): the checkpoint was saved by a job of another "
                                                          r"world size"):
        model.load_state_dict(saved["model"])


def test_consolidation_names_missing_and_foreign_files(job, tmp_path):
    import shutil

    from xladev.fsdp import ShardedCheckpointError, consolidate_sharded_model_checkpoints

    shutil.copy(job / "nested_rank-00000000-of-00000002.pth", tmp_path / "ckpt_rank-0.pth")
    with pytest.raises(ShardedCheckpointError, match=r"was saved by rank 0 of 2 processes, but .* matches 1 files"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "ckpt"), "_rank-*.pth")
    shutil.copy(job / "nested_rank-00000000-of-00000002.pth", tmp_path / "ckpt_rank-1.pth")
    with pytest.raises(ShardedCheckpointError, match=r"hold ranks \[0, 0\], not 0\.\.1 once each"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "ckpt"), "_rank-*.pth")
    torch.save({"weights": 1}, tmp_path / "other_rank-0.pth")
    with pytest.raises(ShardedCheckpointError, match=r"other_rank-0.pth is not an FSDP checkpoint"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "other"), "_rank-*.pth")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint file matches .*nothing\*"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "nothing"), "*")


def test_a_zero1_state_of_another_world_size_is_refused_by_name(job):
    import xladev
    from xladev.fsdp import ShardedStateError, ZeroRedundancyOptimizer

    model = M.build().to(xladev.device())
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2, save_master_weights=True)
    state = torch.load(job / "zero1_state.rank0.pth", weights_only=False)
    with pytest.raises(ShardedStateError, match=r"parameter 0 has shape \[32, 32\], this process's piece \[64, 32\] "
                                                r"\(rank 0 of 1\): the state_dict was saved by a job of another "
                                                r"world size"):
        optimizer.load_state_dict(state)
