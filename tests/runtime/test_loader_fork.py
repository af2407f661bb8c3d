"""DeviceLoader cleans up when a loop ends early, and a forked child that touches the device fails at once.

The fork tests run in a fresh interpreter with a deadline: without the guard such a child hangs for
ever, so a regression costs at most about a minute, then fails.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import xladev
from xladev.runtime.graph.fork_guard import FORK_ERROR


def _loader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "xladev-loader"}


def _wait_until(condition, timeout: float = 20.0) -> float:
    """Seconds until `condition()` held; fails the test past `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"still not true after {timeout} s: {condition.__doc__}")
        time.sleep(0.01)
    return time.monotonic() - start


class _Spawned:
    """The loader threads and child processes that appear from here on (others' are not this test's)."""

    def __init__(self) -> None:
        self.threads = _loader_threads()
        self.children = multiprocessing.active_children()

    def workers(self) -> list:
        return [p for p in multiprocessing.active_children() if p not in self.children]

    def cleaned_up(self, workers=()) -> float:
        def done():
            """the xladev-loader thread is gone and the DataLoader workers have exited"""
            return not (_loader_threads() - self.threads) and not any(p.is_alive() for p in workers)

        return _wait_until(done)


def _dataloader(n: int = 400, **kwargs) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(n * 3.0).view(n, 3)), batch_size=2, **kwargs)


def test_break_stops_the_producer_and_the_dataloader_workers(dev):
    spawned = _Spawned()
    workers = []
    for i, (batch,) in enumerate(xladev.DeviceLoader(_dataloader(num_workers=2), dev, prefetch=2)):
        assert batch.device == dev
        if i == 3:
            workers = spawned.workers()
            time.sleep(0.3)  # let the producer fill the queue and block on it
            break
    assert len(workers) == 2
    assert spawned.cleaned_up(workers) < 15
    assert all(p.exitcode is not None for p in workers)


def test_break_stops_the_producer_of_a_plain_list(dev):
    spawned = _Spawned()
    batches = [torch.full((2,), float(i)) for i in range(50)]
    for i, batch in enumerate(xladev.DeviceLoader(batches, dev, prefetch=1)):
        if i == 2:
            time.sleep(0.2)
            break
    assert spawned.cleaned_up() < 5


def test_an_exception_in_the_loop_stops_the_producer(dev):
    spawned = _Spawned()
    workers = []
    with pytest.raises(KeyError):
        for batch in xladev.DeviceLoader(_dataloader(num_workers=2), dev):
            workers = spawned.workers()
            raise KeyError("in the training step")
    assert len(workers) == 2
    spawned.cleaned_up(workers)


def test_dropping_the_iterator_stops_the_producer(dev):
    spawned = _Spawned()
    it = iter(xladev.DeviceLoader(_dataloader(num_workers=2), dev))
    next(it)
    workers = spawned.workers()
    assert len(workers) == 2
    del it
    gc.collect()
    spawned.cleaned_up(workers)


def test_full_epochs_yield_every_batch_in_order(dev):
    spawned = _Spawned()
    loader = _dataloader(n=20, num_workers=2)
    for _ in range(2):
        seen = [batch.cpu() for (batch,) in xladev.DeviceLoader(loader, dev)]
        assert torch.equal(torch.cat(seen), torch.arange(60.0).view(20, 3))
    spawned.cleaned_up(spawned.workers())


def test_persistent_workers_survive_a_break_and_serve_the_next_epoch(dev):
    spawned = _Spawned()
    loader = _dataloader(n=40, num_workers=2, persistent_workers=True)
    for i, _ in enumerate(xladev.DeviceLoader(loader, dev)):
        if i == 1:
            break
    spawned.cleaned_up()
    workers = loader._iterator._workers
    assert all(p.is_alive() for p in workers)  # kept by design, as the DataLoader promises
    assert sum(1 for _ in xladev.DeviceLoader(loader, dev)) == 20
    loader._iterator._shutdown_workers()


class _FailsAt(Dataset):
    def __init__(self, bad: int) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return torch.tensor([float(i)])


def test_an_exception_in_the_loader_reaches_the_loop(dev):
    def batches():
        yield torch.ones(2)
        raise ValueError("broken shard")

    with pytest.raises(ValueError, match="broken shard"):
        for _ in xladev.DeviceLoader(batches(), dev):
            pass
    spawned = _Spawned()
    with pytest.raises(ValueError, match="bad sample 5"):
        for _ in xladev.DeviceLoader(DataLoader(_FailsAt(5), batch_size=2, num_workers=2), dev):
            workers = spawned.workers()
    assert len(workers) == 2
    spawned.cleaned_up(workers)


# ---- forked children ----------------------------------------------------------------------------

_FORKS = textwrap.dedent("""
    import json, os, sys, time
    import torch, xladev

    ACTIONS = {
        "exit normally": lambda: None,  # first: while the parent's last graph still runs
        "op on a device tensor": lambda: t * 3,
        "torch.zeros(device=)": lambda: torch.zeros(2, device="xla"),
        "cpu tensor .to()": lambda: torch.ones(2).to("xla"),
        "torch.tensor(device=)": lambda: torch.tensor([1.0], device="xla"),
        ".cpu()": lambda: t.cpu(),
        ".tolist()": lambda: t.tolist(),
        "print": lambda: repr(t),
        "mark_step with a pending tensor": lambda: xladev.mark_step(),
        "torch.xla.manual_seed": lambda: torch.xla.manual_seed(1),
        "_is_in_bad_fork": lambda: torch.xla._is_in_bad_fork(),
        "torch.manual_seed": lambda: torch.manual_seed(1) and None,
    }

    def child(name, action, out):
        try:
            result = {"value": action()}
            result["value"] = result["value"] if isinstance(result["value"], (bool, type(None))) else "a value"
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        with open(os.path.join(out, name), "w") as fh:
            json.dump(result, fh)
        if name == "exit normally":
            sys.exit(0)  # through interpreter shutdown, which waits on graphs in flight
        os._exit(0)

    def fork(name, action):
        pid = os.fork()
        if pid == 0:
            child(name, action, sys.argv[1])
        return name, pid

    # Before the device starts, a child may start its own.
    pids = [fork("before the device started", lambda: (torch.ones(2, device="xla") + 1).tolist() == [2.0, 2.0])]
    t = torch.arange(4.0, device="xla")
    t.tolist()
    big = torch.randn(1000, 1000, device="xla")
    for _ in range(6):
        big = big @ big / 1000
    xladev.mark_step()  # dispatched, not waited for: the child's exit must not wait for it either
    pending = t + 1  # recorded, not run: a barrier in the child would have to run it
    from xladev.runtime.api.runtime_state import executor
    running = any(d.done.locked() for d in executor.in_flight._unannounced)
    pids += [fork(name, action) for name, action in ACTIONS.items()]

    deadline = time.monotonic() + 30
    status = {}
    while len(status) < len(pids) and time.monotonic() < deadline:
        for name, pid in pids:
            if name not in status and os.waitpid(pid, os.WNOHANG)[0]:
                status[name] = "exited"
        time.sleep(0.02)
    for name, pid in pids:
        if name not in status:
            os.kill(pid, 9)
            status[name] = "hung"
    print(json.dumps({"status": status, "parent": (pending * 2).tolist(), "running at fork": running}))
""")


@pytest.fixture(scope="module")
def forks(tmp_path_factory):
    out = tmp_path_factory.mktemp("forks")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", _FORKS, str(out)], capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    results = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    return report, results


@pytest.mark.parametrize("action", [
    "op on a device tensor", "torch.zeros(device=)", "cpu tensor .to()", "torch.tensor(device=)", ".cpu()",
    ".tolist()", "print", "mark_step with a pending tensor", "torch.xla.manual_seed",
])
def test_forked_child_touching_the_device_fails_at_once(forks, action):
    report, results = forks
    assert report["status"][action] == "exited"
    assert results[action]["error"].startswith(f"RuntimeError: {FORK_ERROR}")


def test_forked_child_knows_it_is_in_a_bad_fork(forks):
    report, results = forks
    assert results["_is_in_bad_fork"] == {"value": True}
    # torch.manual_seed (every DataLoader worker calls it) leaves the xla generator alone there.
    assert results["torch.manual_seed"] == {"value": None}
    # Exiting runs the interpreter's shutdown, which settles graphs in flight: not the parent's.
    assert report["running at fork"]
    assert report["status"]["exit normally"] == "exited" and results["exit normally"] == {"value": None}


def test_child_forked_before_the_device_started_can_use_it(forks):
    report, results = forks
    assert results["before the device started"] == {"value": True}
    assert report["parent"] == [2.0, 4.0, 6.0, 8.0]  # and the parent goes on


_WORKERS = textwrap.dedent("""
    import torch, xladev
    from torch.utils.data import DataLoader

    class OnDevice(torch.utils.data.Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return torch.full((2,), float(i), device="xla")

    t = torch.ones(2, device="xla")
    t.tolist()
    cpu = DataLoader(list(range(8)), batch_size=4, num_workers=2, multiprocessing_context="fork")
    assert [b.tolist() for b in xladev.DeviceLoader(cpu, xladev.device())] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for name, loader in [
        ("dataset", DataLoader(OnDevice(), batch_size=4, num_workers=2, multiprocessing_context="fork")),
        ("collate_fn", DataLoader(list(range(8)), batch_size=4, num_workers=2, multiprocessing_context="fork",
                                  collate_fn=lambda batch: t.tolist())),
    ]:
        try:
            list(loader)
        except RuntimeError as exc:
            print(name, "raised:", str(exc).replace(chr(10), " "))
""")


def test_dataloader_fork_worker_that_touches_the_device_fails_at_once():
    # Warnings on: the workers that only load CPU data say nothing (jax's "os.fork() was called ... deadlock"
    # warning, once per forking call site, is kept off), and those that touch the device raise FORK_ERROR.
    done = subprocess.run([sys.executable, "-c", _WORKERS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "os.fork()" not in done.stderr, done.stderr[-3000:]
    lines = dict(line.split(" raised: ", 1) for line in done.stdout.splitlines() if " raised: " in line)
    assert set(lines) == {"dataset", "collate_fn"}, done.stdout
    for message in lines.values():
        assert "DataLoader worker process" in message and FORK_ERROR in message
