"""Real processes for the fault tests: small training scripts run under a fault, and what their user sees.

Each script is a tiny model so a run takes seconds; the outputs are the real sinks, the readers the real
`xladev report` / `xladev diff` commands.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time

# A few steps of a tiny model; prints `step N` after each step and `done` at the end. argv[1]: steps (0: for ever).
TRAIN = textwrap.dedent("""
    import sys, torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = int(sys.argv[1])
    step = 0
    while steps == 0 or step < steps:
        loss = model(torch.ones(3, 4, device=dev)).pow(2).sum()
        loss.backward(); opt.step(); opt.zero_grad()
        xladev.mark_step()
        print("step", step, flush=True)
        step += 1
    print("done", loss.item(), flush=True)
""")

# What the fault tests set themselves; inherited values would change what the scripts write.
_OURS = ("XLA_METRICS_FILE", "XLA_SAVE_TENSORS_FILE", "PT_XLA_DEBUG", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE",
         "XLADEV_EVENT_LOG", "WORLD_SIZE", "RANK", "LOCAL_RANK")


def environment(**env: str) -> dict:
    """This process's environment without the outputs' variables, plus `env`."""
    out = {k: v for k, v in os.environ.items() if k not in _OURS}
    out.update(env)
    return out


def write_script(tmp_path, text: str = TRAIN, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def file_size_limit(limit: int):
    """A `preexec_fn`: files the child writes may not grow past `limit` bytes (`ulimit -f`), and a write past
    it fails with EFBIG instead of killing the child with SIGXFSZ: a disk that fills up, on any machine."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def all_outputs_environment(tmp_path) -> tuple[dict, dict]:
    """(paths, environment) for a run that writes all three outputs: an event log (`log`), a metrics file
    (`metrics`) and a PT_XLA_DEBUG_LEVEL=1 log (`debug`), under `tmp_path`."""
    paths = {"log": tmp_path / "run.jsonl", "metrics": tmp_path / "metrics.txt", "debug": tmp_path / "debug.txt"}
    env = environment(XLADEV_EVENT_LOG=str(paths["log"]), XLA_METRICS_FILE=str(paths["metrics"]),
                      PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(paths["debug"]))
    return paths, env


def run(args: list[str], env: dict, timeout: float = 120, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=preexec_fn)


def start(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def wait_for_line(process: subprocess.Popen, prefix: str, timeout: float = 120) -> None:
    """Reads the child's stdout until a line starts with `prefix`."""
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        if line.startswith(prefix):
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no line starting with {prefix!r} from the child; stderr: {process.stderr.read()[-2000:]}")


def xladev_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("xladev: ")]


def assert_no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]


def xladev_command(*args: str) -> subprocess.CompletedProcess:
    """The `xladev` command, as the user runs it."""
    return subprocess.run([sys.executable, "-m", "xladev_cli", *args], capture_output=True, text=True, timeout=120,
                          env=environment(COLUMNS="200"))


def log_records(path, cut_ok: bool = False) -> list[dict]:
    """The event log's complete records; asserts each parses, and that no line is cut (unless `cut_ok`: a
    killed writer may leave its last line cut, which the readers skip)."""
    from xladev.schema import records as rec

    data = open(path, "rb").read()
    lines = data.split(b"\n")
    assert cut_ok or lines[-1] == b"", f"{path} ends in a cut line: {data[-200:]!r}"
    lines = lines[:-1]
    for line in lines:
        assert rec.parse_line(line) is not None, line
    return [json.loads(line) for line in lines]
