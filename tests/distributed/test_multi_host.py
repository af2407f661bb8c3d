"""A job over two hosts of two processes each, the hosts made on this machine as network namespaces
(tests/distributed/network_hosts.py), the coordinator at host 0's address, as on a real cluster:

    torchrun --nnodes 2 --node-rank H --nproc-per-node 2 --master-addr HOST0 ... multi_host_job.py

It trains as one host does (data parallel, against eager CPU on the whole batch), and when one host goes down
the other's ranks name it. Skipped where namespaces cannot be made (no root, no iproute2).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch

from tests.distributed.harness import REPO, Job, run_jobs
from tests.distributed.network_hosts import NetworkHosts, Unavailable
from tests.parity_bounds import GRAD_REL, PARAM_REL, loss_rtol

JOB = REPO / "tests" / "distributed" / "multi_host_job.py"
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def hosts():
    try:
        made = NetworkHosts.make()
    except Unavailable as exc:
        pytest.skip(f"no hosts can be made on this machine: {exc}")
    yield made
    made.close()


def _run_job(hosts: NetworkHosts, out, die_on_host: int | None = None) -> list[Job]:
    """Both hosts' torchrun, together; a `Job` per host."""
    port = str(random.randint(20000, 40000))  # each host has a network of its own: any port is free there
    jobs = []
    for index in (0, 1):
        env = {"XLADEV_DIST_TIMEOUT": "120"}
        if index == die_on_host:
            env["XLADEV_TEST_DIE_AT_STEP"] = "1"
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(index),
                "--nproc-per-node", "2", "--master-addr", hosts.addresses[0], "--master-port", port, str(JOB),
                str(out)]
        jobs.append((hosts.argv(index, argv), env))
    return run_jobs(jobs, TIMEOUT_S)


def test_two_hosts_of_two_processes_train_as_one_host_does(hosts, tmp_path):
    for job in _run_job(hosts, tmp_path):
        assert job.returncode == 0, job.output[-6000:]
    seen = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(4)]
    assert [s["world"] for s in seen] == [4] * 4
    assert [s["host"] for s in seen] == [hosts.names[0]] * 2 + [hosts.names[1]] * 2
    for rank, s in enumerate(seen):
        for step, (cpu_loss, _) in enumerate(s["losses"]):
            mean = sum(other["losses"][step][1] for other in seen) / 4  # the global batch's loss
            assert mean == pytest.approx(cpu_loss, rel=loss_rtol())
        # Plain SGD, 3 steps of lr 0.1: each step's gradient may differ by GRAD_REL of the gradient scale.
        drift = 2 * 3 * 0.1 * GRAD_REL * s["grad_scale"]
        for name, want in s["cpu_weights"].items():
            torch.testing.assert_close(torch.tensor(s["weights"][name]), torch.tensor(want),
                                       rtol=3 * PARAM_REL, atol=drift, msg=f"rank {rank} {name}")
        assert s["weights"] == seen[0]["weights"]  # every replica holds the same model


def test_a_host_that_goes_down_is_named_by_the_other_hosts_ranks(hosts, tmp_path):
    host0, host1 = _run_job(hosts, tmp_path, die_on_host=1)
    assert host0.returncode != 0 and host1.returncode != 0
    out0 = host0.output
    label = f"{hosts.names[1]} at {hosts.addresses[1]}"
    for rank in (0, 1):
        for lost in (2, 3):
            assert (f"xladev: rank {rank}: rank {lost} of 4 is gone (its process ended or stopped answering without "
                    f"leaving the job; it ran on host {label})") in out0, out0[-6000:]
        assert f"xladev: rank {rank}: host {label} is gone: every rank on it (2, 3) ended or stopped answering" in out0
    # Each surviving rank's step fails naming a rank of the lost host, not a hang. (Read from the files the ranks
    # write: torchrun may stop a host's second rank before its traceback is printed, once the first has failed.)
    for rank in (0, 1):
        error = (tmp_path / f"error{rank}.txt").read_text()
        assert error.startswith(f"rank {rank}: ") and ("cannot run: rank 2 of 4 is gone" in error
                                                       or "cannot run: rank 3 of 4 is gone" in error), error


@pytest.mark.parametrize("name, told", [("localhost", True), (None, False)])
def test_a_host_name_that_resolves_to_loopback_is_told_at_the_join(hosts, name, told):
    # What a rank of a job over several hosts runs at the join: gloo would give the others the name's address.
    code = "from xladev.runtime.graph.world import _warn_if_name_is_loopback as warn; warn(5)"
    done = subprocess.run(hosts.argv(0, [sys.executable, "-c", code], name=name), capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("this job spans several hosts" in done.stderr) is told, done.stderr[-3000:]
    if told:
        said = "rank 5: this job spans several hosts, but this host's name 'localhost' resolves to 127.0.0.1"
        assert said in done.stderr
