"""Collectives over two real processes (`xladev run` of tests/distributed/collectives_job.py, torch_xla.launch).

One job runs every case once; each test compares what the ranks got with the eager CPU result computed here from
both ranks' inputs (tests/distributed/collectives_inputs.py). A sum of two float32 values is correctly rounded on
both sides and the scales are powers of two, so the tolerance is one float32 rounding of the result.
"""

from __future__ import annotations

import sys
import time

import pytest
import torch

from tests.distributed.collectives_inputs import LIST_LEN, inputs
from tests.distributed.harness import REPO, run_job

SCRIPT = REPO / "tests" / "distributed" / "collectives_job.py"
RANKS = (0, 1)
EPS = torch.finfo(torch.float32).eps


def close(got, want) -> None:
    torch.testing.assert_close(got, want, rtol=EPS, atol=0)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives_job")
    env = {"CPU_NUM_DEVICES": "2", "XLADEV_DIST_TIMEOUT": "60"}
    start = time.monotonic()
    done = run_job([sys.executable, "-m", "xladev.cli.main", "run", str(SCRIPT), str(out)], env, timeout=420)
    assert done.returncode == 0, done.output[-6000:]
    seen = {rank: torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in RANKS}
    return out, seen, time.monotonic() - start


@pytest.fixture(scope="module")
def data():
    return {rank: inputs(rank) for rank in RANKS}


def _summed(data, key):
    return data[0][key] + data[1][key]


def test_each_process_is_a_replica(job):
    _, seen, _ = job
    assert [(seen[r]["rank"], seen[r]["world"]) for r in RANKS] == [(0, 2), (1, 2)]


def test_reduce_scatter_of_a_list_with_and_without_pin_layout(job, data):
    _, seen, _ = job
    for rank in RANKS:
        got = seen[rank]["lists"]
        want = [((a + b) * 0.5).chunk(2, dim=1)[rank] for a, b in zip(data[0]["list"], data[1]["list"])]
        for key in ("rs_pinned", "rs_output", "rs_bucketized"):
            assert len(got[key]) == LIST_LEN, key
            for g, w in zip(got[key], want):
                close(g, w)
        assert got["rs_output_is_output"]
        for g, a, b in zip(got["rs_max"], data[0]["list"][:2], data[1]["list"][:2]):
            close(g, torch.maximum(a, b).chunk(2, dim=2)[rank])


def test_all_gather_of_a_list(job, data):
    _, seen, _ = job
    for rank in RANKS:
        for g, a, b in zip(seen[rank]["lists"]["ag_list"], data[0]["list"][:2], data[1]["list"][:2]):
            close(g, torch.cat([a, b], dim=1))


def test_a_replica_group_in_another_order_keeps_its_order(job, data):
    # groups=[[1, 0]]: rank 1 comes first in the group, so it holds the first slice and its value comes first.
    _, seen, _ = job
    x0, x1 = data[0]["x"], data[1]["x"]
    for rank in RANKS:
        got = seen[rank]["groups"]
        close(got["rs_reversed_group"], (x0 + x1).chunk(2, dim=0)[1 - rank])
        close(got["ag_reversed_group"], torch.cat([x1, x0]))
        close(got["ar_own_groups"], data[rank]["x"])


def test_rendezvous_of_a_subgroup_and_in_the_order_asked(job):
    _, seen, _ = job
    for rank in RANKS:
        got = seen[rank]["rendezvous"]
        assert got["own"] == [f"ORD={rank}".encode()]
        assert got["reversed"] == [b"r1", b"r0"]
        assert got["rounds"] == [[f"{r}:{n}".encode() * (r + 1) for r in (rank, 1 - rank)] for n in range(2)]
        assert got["not_a_member"] == (f"ValueError: rendezvous: replicas=[{1 - rank}] does not include this replica "
                                       f"({rank}); only the members of a subgroup call its rendezvous")


def test_a_rendezvous_with_a_member_that_left_fails_naming_it(job):
    out, _, _ = job
    assert (out / "late.txt").read_text() == (
        "DistributedError: rank 0: rendezvous 'late' among replicas [0, 1] cannot run: rank 1 has left the job (its "
        "function returned) without running it; every rank must run the same collectives")


def test_torch_compile_fullgraph_traces_the_collectives(job, data):
    _, seen, _ = job
    x, y = _summed(data, "x"), _summed(data, "y")
    for rank in RANKS:
        got = seen[rank]["compiled"]
        close(got["xm_all_reduce"], x)
        a, b = x * 0.5, y * 0.5  # the in-place list all-reduce
        close(got["step_a"], a)
        close(got["step_b"], b)
        close(got["step_gathered"], torch.cat([a * 2, a * 2]))
        close(got["step_shards"][0], x.chunk(2)[rank])
        close(got["step_shards"][1], (2 * torch.cat([a * 2, a * 2])).chunk(2)[rank])
        close(got["openxla"], y)
        close(got["eager_backend"], y)
        first, second = got["graphs"]  # one graph each: TorchDynamo broke neither
        assert "torch.ops.xladev.all_reduce" in first
        for op in ("torch.ops.xladev.all_reduce", "torch.ops.xladev.all_gather", "torch.ops.xladev.reduce_scatter"):
            assert op in second, second


def test_torch_distributed_functional_collectives_on_xla_tensors(job, data):
    _, seen, _ = job
    x, y = _summed(data, "x"), _summed(data, "y")
    for rank in RANKS:
        got = seen[rank]["functional"]
        close(got["all_reduce"], x)
        close(got["avg"], y * 0.5)
        close(got["all_gather"], torch.cat([data[0]["x"], data[1]["x"]]))
        close(got["reduce_scatter"], x.chunk(2)[rank])
        close(got["all_to_all"], torch.cat([data[0]["y"].chunk(2)[rank], data[1]["y"].chunk(2)[rank]]))
        close(got["broadcast"], data[1]["y"])
        close(got["compiled"], x * 2)
        close(got["compiled_dist"], x)
        close(got["xm_after_init"], y)
        functional_graphs, after_init = got["graphs"][:2], got["graphs"][2:]
        assert all("_c10d_functional.all_reduce" in g for g in functional_graphs), functional_graphs
        assert len(after_init) == 1 and "torch.ops.xladev.all_reduce" in after_init[0]


def test_send_and_recv_as_pairs(job, data):
    _, seen, _ = job
    for rank in RANKS:
        got = seen[rank]["send_recv"]
        other = 1 - rank
        close(got["received"], data[other]["x"] * (other + 1))
        close(got["received_async"], data[other]["x"] * (other + 1))
        assert got["mismatch"].startswith(f"CollectiveMismatchError: rank {rank}: the ranks are about to run different "
                                          "graphs holding collectives"), got["mismatch"]
        assert "xla::collective_permute" in got["mismatch"]


def test_the_profile_carries_each_graphs_collectives_and_their_bytes(job, data):
    """Each rank's capture around one graph holding an all_reduce and an all_gather of a [4, 3] float32 tensor:
    its `xladev.execute` span says 2 collectives moving 96 bytes from this rank (48 bytes of operand each)."""
    _, seen, _ = job
    nbytes = data[0]["x"].numel() * data[0]["x"].element_size()
    for rank in RANKS:
        spans = seen[rank]["profile"]
        assert len(spans) == 1, spans
        assert (spans[0]["collectives"], spans[0]["collective_bytes"]) == ("2", str(2 * nbytes))
        assert spans[0]["hlo_module"].startswith("jit_xladev_")
