"""Cross-process capture: a child trains with a profiler server; this process captures from it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import xladev.debug.profiler as xp
from xladev.cli.main import main as cli_main
from xladev.debug._profiler_common import hlo_modules, load_trace, trace_events
from tests.profiler.conftest import child_env, free_port, stop_process, wait_for_line

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child_train.py")


@pytest.fixture(scope="module")
def child():
    port = free_port()
    proc = subprocess.Popen([sys.executable, CHILD, str(port), "120"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=child_env())
    try:
        ready = wait_for_line(proc, "READY", timeout_s=90)
        yield port, set(ready.split()[1:]), proc
    finally:
        stop_process(proc)


def check_child_profile(path: str, port: int, hashes: set[str]) -> None:
    assert os.path.basename(path) == f"localhost_{port}.xplane.pb"
    assert os.path.getsize(path) > 0
    events = trace_events(load_trace(path))
    names = {e["name"] for e in events}
    assert any(n.startswith("child_train ") for n in names)
    assert "child_forward" in names
    graphs = {e["args"]["graph"] for e in events if e["name"] == "xladev.execute"}
    assert graphs and graphs <= hashes
    assert not any(n.startswith("PjitFunction(jit(xladev_") for n in names)  # each run once, as xladev.execute
    modules = hlo_modules(path)  # the graph viewer's modules: one per graph the capture ran
    for graph in graphs:
        assert any(m.startswith(f"jit_xladev_{graph[:16]}(") for m in modules), (graph, modules)


def test_trace_then_trace_detached(child, tmp_path):
    port, hashes, proc = child
    path = xp.trace(f"localhost:{port}", str(tmp_path), duration_ms=500)
    check_child_profile(path, port, hashes)

    handle = xp.trace_detached(f"localhost:{port}", str(tmp_path / "detached"), duration_ms=400)
    assert handle.join(timeout=60) == handle.path
    assert handle.done and handle.error is None, handle.error
    check_child_profile(handle.path, port, hashes)
    assert handle.result(0) == handle.path
    assert proc.poll() is None  # the training kept running


def test_trace_detached_wrong_port_gives_error_in_bounded_time(tmp_path):
    port = free_port()
    start = time.monotonic()
    handle = xp.trace_detached(f"localhost:{port}", str(tmp_path), duration_ms=300, report_errors=False)
    handle.join(timeout=30)
    assert handle.done, "a capture from a wrong port must end, not hang"
    assert time.monotonic() - start < 30
    assert handle.path is None
    assert isinstance(handle.error, xp.ProfilerError)
    message = str(handle.error)
    assert "No trace event is collected" in message and f"localhost:{port}" in message
    assert "start_server" in message  # says what to check
    with pytest.raises(xp.ProfilerError):
        handle.result(0)


def test_capture_command_on_a_schedule(child, tmp_path, capfd):
    port, hashes, _ = child
    logdir = str(tmp_path / "cli")
    rc = cli_main(["capture", "--service_addr", f"localhost:{port}", "--logdir", logdir, "--duration_ms", "300",
                   "--interval_s", "0.5", "--count", "2"])
    out, err = capfd.readouterr()  # the file descriptors: native output would show here
    assert rc == 0, out + err
    assert err == "" and "Starting to trace" not in out
    assert all(line.startswith(("[1/2] ", "[2/2] ", "2 of 2")) for line in out.splitlines()), out
    assert out.count("wrote ") == 2 and "2 of 2 capture(s) succeeded" in out
    assert f"tensorboard --logdir {logdir}" in out
    files = [line.split()[2] for line in out.splitlines() if " wrote " in line]
    for path in files:
        check_child_profile(path, port, hashes)


def test_capture_command_wrong_port_exit_code(tmp_path, capsys):
    rc = cli_main(["capture", "--service_addr", f"localhost:{free_port()}", "--logdir", str(tmp_path),
                   "--duration_ms", "200"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "No trace event is collected" in err
