"""Bad input gives clear errors: busy ports, no server, unwritable log directories, double starts."""

from __future__ import annotations

import os
import socket
import time

import pytest

import xladev
import xladev.debug.profiler as xp
from xladev._flags import ConfigError, config
from tests.profiler.conftest import free_port


def unwritable_dir(tmp_path) -> str:
    # A path under a regular file cannot be created, even by root (tests may run as root).
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    return str(blocker / "logs")


def test_start_server_on_busy_port_names_the_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(xp.ProfilerError, match=rf"port {port} is already in use"):
            xp.start_server(port)
    from xladev.debug._profiler_server import current_server

    assert current_server() is None


def test_start_server_twice_and_stop():
    server = xp.start_server(0)
    assert server.running and server.port > 0 and server.address == f"localhost:{server.port}"
    assert xp.start_server(server.port) is server  # same port: the same server
    other = free_port()
    with pytest.raises(xp.ProfilerError, match=rf"already runs in this process on port {server.port}"):
        xp.start_server(other)
    xp.stop_server()
    assert not server.running
    with pytest.raises(xp.ProfilerError, match="0..65535"):
        xp.start_server(70000)


def test_trace_without_server_is_fast_and_explained(tmp_path):
    port = free_port()
    start = time.monotonic()
    with pytest.raises(xp.ProfilerError) as info:
        xp.trace(f"localhost:{port}", str(tmp_path), duration_ms=200)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert "No trace event is collected" in message
    assert f"localhost:{port}" in message and "connection refused" in message
    assert "xp.start_server(PORT)" in message and "xladev doctor" in message


def test_trace_to_something_that_is_not_a_profiler_server_is_bounded(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(xp.ProfilerError):
            xp.trace(f"localhost:{port}", str(tmp_path), duration_ms=200, num_tracing_attempts=1, timeout_s=3)
        assert time.monotonic() - start < 10


@pytest.mark.parametrize("addr", ["localhost", "localhost:http", ":9012", "localhost:0", "localhost:99999"])
def test_malformed_service_address(addr, tmp_path):
    with pytest.raises(xp.ProfilerError, match="HOST:PORT"):
        xp.trace(addr, str(tmp_path))
    with pytest.raises(xp.ProfilerError, match="HOST:PORT"):
        xp.trace_detached(addr, str(tmp_path))


def test_unwritable_logdir(tmp_path):
    bad = unwritable_dir(tmp_path)
    with pytest.raises(xp.ProfilerError, match="cannot write profiles under log directory") as info:
        xp.start_trace(bad)
    assert bad in str(info.value)
    with pytest.raises(xp.ProfilerError, match="cannot write profiles"):
        xp.trace("localhost:9", bad)
    with pytest.raises(xp.ProfilerError, match="cannot write profiles"):
        xp.profile_steps(bad, start=100, count=1)
    # Nothing was left running: a normal trace starts and stops.
    xp.start_trace(str(tmp_path / "ok"))
    assert os.path.getsize(xp.stop_trace()) > 0


def test_double_start_and_stop_without_start(tmp_path):
    with pytest.raises(xp.ProfilerError, match="no profile trace is running"):
        xp.stop_trace()
    xp.start_trace(str(tmp_path))
    with pytest.raises(xp.ProfilerError, match="already running .*start_trace"):
        xp.start_trace(str(tmp_path / "second"))
    with pytest.raises(xp.ProfilerError, match="already running"):
        with xp.trace_session(str(tmp_path / "third")):
            pass
    xladev.mark_step()
    assert xp.stop_trace().endswith(".xplane.pb")
    with pytest.raises(xp.ProfilerError, match="no profile trace is running"):
        xp.stop_trace()


def test_profile_steps_bad_windows(tmp_path):
    from xladev.runtime.api.runtime_state import executor

    xladev.mark_step()
    with pytest.raises(xp.ProfilerError, match="already begun"):
        xp.profile_steps(str(tmp_path), start=executor.step - 1, count=2)
    with pytest.raises(xp.ProfilerError, match="count must be"):
        xp.profile_steps(str(tmp_path), start=executor.step + 5, count=0)
    window = xp.profile_steps(str(tmp_path), start=executor.step + 50, count=3, announce=False)
    with pytest.raises(xp.ProfilerError, match="overlap"):
        xp.profile_steps(str(tmp_path), start=executor.step + 51, count=1)
    window.cancel()
    assert window.done and window.path is None and isinstance(window.error, xp.ProfilerError)


def read_flag_from_env(name: str):
    # The registry's own environment reading and validation, without touching other flags' values.
    return config._from_env(config.flag(name))


@pytest.mark.parametrize("value", ["5", "5-8", "8:5", "5:5", "a:b", "-1:3", "5:8:2"])
def test_malformed_profile_steps_variable(value, monkeypatch):
    monkeypatch.setenv("XLADEV_PROFILE_STEPS", value)
    with pytest.raises(ConfigError, match="XLADEV_PROFILE_STEPS") as info:
        read_flag_from_env("profile_steps")
    assert "START:STOP" in str(info.value) or "greater than START" in str(info.value)


def test_profile_steps_variable_parses(monkeypatch):
    monkeypatch.setenv("XLADEV_PROFILE_STEPS", " 5:8 ")
    assert read_flag_from_env("profile_steps") == (5, 8)
    monkeypatch.setenv("XLADEV_PROFILE_STEPS", "")
    assert read_flag_from_env("profile_steps") is None


def test_a_busy_server_is_named_as_the_cause(tmp_path):
    """A capture while another profiling session records in the traced process (here: this one's own
    in-process trace) says so, instead of "recorded nothing"."""
    server = xp.start_server(0)
    xp.start_trace(str(tmp_path / "inprocess"))
    try:
        start = time.monotonic()
        with pytest.raises(xp.ProfilerError) as info:
            xp.trace(server.address, str(tmp_path / "remote"), duration_ms=300)
        assert time.monotonic() - start < 30
    finally:
        xp.stop_trace()
    message = str(info.value)
    assert f"profiler server at {server.address} is busy" in message
    assert "another profiling session is active" in message and "recorded nothing" not in message


def test_an_idle_process_gives_an_empty_capture_error(tmp_path):
    server = xp.start_server(0)
    with pytest.raises(xp.ProfilerError) as info:
        xp.trace(server.address, str(tmp_path), duration_ms=200, num_tracing_attempts=1)
    message = str(info.value)
    assert "No trace event is collected" in message and "recorded nothing" in message
    assert "busy" not in message and "doing work during the capture window" in message


def test_capture_command_names_the_cause_and_prints_nothing_stray(tmp_path, capfd):
    from xladev.cli.main import main as cli_main

    # A malformed address is a bad argument: exit 2, before anything is attempted.
    assert cli_main(["capture", "--service_addr", "localhost", "--logdir", str(tmp_path)]) == 2
    out, err = capfd.readouterr()
    assert "--service_addr" in err and "HOST:PORT" in err and out == ""
    # A busy server: exit 1 with the cause; the native client's own lines ("Starting to trace ...") stay out.
    server = xp.start_server(0)
    xp.start_trace(str(tmp_path / "inprocess"))
    try:
        rc = cli_main(["capture", "--service_addr", server.address, "--logdir", str(tmp_path / "cli"),
                       "--duration_ms", "300"])
    finally:
        xp.stop_trace()
    out, err = capfd.readouterr()
    assert rc == 1
    assert out == f"capturing 300 ms from {server.address} ...\n"
    assert "is busy: another profiling session is active" in err and "Starting to trace" not in out + err
