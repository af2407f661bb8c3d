"""Running multi-process jobs in tests: real processes on localhost, each job bounded in time.

A job runs in its own session, so a timeout stops every process it started (torchrun's workers, the
processes `xladev.launch` spawned) and no test leaves a process behind.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Job:
    """A finished job: its exit status, output and wall time."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_job(argv: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None) -> Job:
    """Runs `argv` in a new session with `env` added to this process's environment; kills the whole session
    if it outlives `timeout` (then the returned status is -9)."""
    return run_jobs([(argv, env)], timeout, cwd)[0]


def run_jobs(jobs: list[tuple[list[str], dict[str, str]]], timeout: float, cwd: Path | None = None) -> list[Job]:
    """Runs the jobs (`argv`, `env` added to this process's environment) at once, each in a new session, and
    waits for all; kills every session still there after `timeout` (their status is then -9)."""
    start = time.monotonic()
    procs = [subprocess.Popen(argv, env=_job_environment(env), cwd=cwd or REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) for argv, env in jobs]
    done = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(0.0, start + timeout - time.monotonic()))
                done.append(Job(proc.returncode, out, err, time.monotonic() - start))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                done.append(Job(-9, out, err + f"\n[harness] killed after {timeout:g} s", time.monotonic() - start))
    finally:
        for proc in procs:  # a process of a job that outlived its launcher, or a job not waited for
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc.poll() is None:
                proc.communicate()
    return done


def _job_environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment with `env` added, the repository first on PYTHONPATH, and no launcher's
    variables the job does not set itself (a test run under torchrun must not pass its own on)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **env)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full_env.get("PYTHONPATH", "")) if p)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "XLADEV_COORDINATOR_ADDRESS", "CPU_NUM_DEVICES", "XLA_FLAGS"):
        if name not in env:
            full_env.pop(name, None)
    return full_env


def torchrun(script: Path, args: list[str], env: dict[str, str], timeout: float, nproc: int = 2) -> Job:
    """`torchrun --nproc-per-node N script args...` on localhost, on a free port."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script), *args]
    return run_job(argv, env, timeout)
