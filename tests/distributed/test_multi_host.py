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
import signal
import subprocess
import sys

import pytest
import torch

from tests.distributed.harness import REPO
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


def _run_job(hosts: NetworkHosts, out, die_on_host: int | None = None) -> list[tuple[int, str]]:
    """Both hosts' torchrun, together; (exit status, output) per host."""
    port = str(random.randint(20000, 40000))  # each host has a network of its own: any port is free there
    procs = []
    for index in (0, 1):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "TORCHELASTIC_RUN_ID", "XLADEV_COORDINATOR_ADDRESS", "CPU_NUM_DEVICES", "XLA_FLAGS")}
        env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", XLADEV_DIST_TIMEOUT="120")
        if index == die_on_host:
            env["XLADEV_TEST_DIE_AT_STEP"] = "1"
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(index),
                "--nproc-per-node", "2", "--master-addr", hosts.addresses[0], "--master-port", port, str(JOB),
                str(out)]
        procs.append(subprocess.Popen(hosts.argv(index, argv), env=env, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, start_new_session=True))
    results = []
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
            results.append((proc.returncode, output))
    finally:
        for proc in procs:  # a host's processes that outlived its launcher, or the whole job on a timeout
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc.poll() is None:
                proc.communicate()
    return results


def test_two_hosts_of_two_processes_train_as_one_host_does(hosts, tmp_path):
    results = _run_job(hosts, tmp_path)
    for code, output in results:
        assert code == 0, output[-6000:]
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
    (code0, out0), (code1, _) = _run_job(hosts, tmp_path, die_on_host=1)
    assert code0 != 0 and code1 != 0
    label = f"{hosts.names[1]} at {hosts.addresses[1]}"
    for rank in (0, 1):
        for lost in (2, 3):
            assert (f"xladev: rank {rank}: rank {lost} of 4 is gone (its process ended or stopped answering without "
                    f"leaving the job; it ran on host {label})") in out0, out0[-6000:]
        assert f"xladev: rank {rank}: host {label} is gone: every rank on it (2, 3) ended or stopped answering" in out0
    # Each surviving rank's step fails naming a rank of the lost host, not a hang.
    assert out0.count("cannot run: rank 2 of 4 is gone") + out0.count("cannot run: rank 3 of 4 is gone") >= 2


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
