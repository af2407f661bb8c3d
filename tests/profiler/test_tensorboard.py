"""A real TensorBoard (with the profile plugin) serves what xladev captured."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import torch

import xladev
import xladev.debug.profiler as xp
from tests.profiler.conftest import free_port, stop_process


def get(url: str, timeout: float = 30.0) -> tuple[bytes, dict]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        headers = {k.lower(): v for k, v in response.headers.items()}
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return body, headers


def tensorboard_executable() -> list[str]:
    beside = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    return [beside] if os.path.exists(beside) else [sys.executable, "-m", "tensorboard.main"]


def test_tensorboard_serves_the_profile(tmp_path):
    logdir = str(tmp_path)
    device = xladev.device()
    x = torch.ones(8, 8).to(device)
    with xp.trace_session(logdir) as session:
        for i in range(2):
            with xp.StepTrace("tb_step", step_num=i):
                x = torch.tanh(x @ x)
    run = os.path.basename(os.path.dirname(session.path))
    host = os.path.basename(session.path)[: -len(".xplane.pb")]

    port = free_port()
    log = open(tmp_path / "tensorboard.log", "w")  # a file, not a pipe: a full pipe would block the server
    proc = subprocess.Popen(tensorboard_executable() + ["--logdir", logdir, "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/data/plugin/profile"
    try:
        runs = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"tensorboard exited with {proc.returncode}: "
                                     f"{(tmp_path / 'tensorboard.log').read_text()[-2000:]}")
            try:
                body, headers = get(f"{base}/runs", timeout=5)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
                continue
            runs = json.loads(body)
            if run in runs:
                break
            time.sleep(0.3)
        assert runs is not None and run in runs, f"run {run} not served; runs: {runs}"

        body, _ = get(f"{base}/run_tools?" + urllib.parse.urlencode({"run": run}))
        assert any(tool.startswith("trace_viewer") for tool in json.loads(body))
        body, _ = get(f"{base}/hosts?" + urllib.parse.urlencode({"run": run, "tag": "trace_viewer"}))
        assert host in [h["hostname"] for h in json.loads(body)]

        query = urllib.parse.urlencode({"run": run, "tag": "trace_viewer", "host": host})
        body, headers = get(f"{base}/data?{query}", timeout=60)
        assert headers.get("content-encoding") == "gzip"  # TensorBoard compresses its answers
        trace = json.loads(body)
        names = {e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert {"tb_step 0", "tb_step 1", "xladev.execute", "xladev.mark_step"} <= names
        assert any(n.startswith("PjitFunction(jit(xladev_") for n in names)
    finally:
        stop_process(proc)
        log.close()
    assert proc.returncode is not None
