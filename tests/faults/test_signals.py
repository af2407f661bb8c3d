"""A run ended by a signal: SIGTERM writes the end-of-run output and still ends the process; SIGKILL loses no
complete record.

SIGTERM is how torchrun ends the surviving ranks of a failed job. The event log's `end` record then says
`terminated` by `SIGTERM`, the PT_XLA_DEBUG summary is written, and the process dies by the signal as it would
without xladev (status -15 here, 143 in a shell). A handler of the script's keeps deciding what SIGTERM does.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest

from tests.faults import runs
from xladev.report import load


def _terminate(process, timeout: float = 30) -> tuple[str, str]:
    process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=timeout)
    finally:
        process.kill()
        process.wait()


def test_sigterm_writes_the_end_record_and_summary_then_the_process_dies_by_it(tmp_path):
    log, debug, metrics = tmp_path / "run.jsonl", tmp_path / "debug.txt", tmp_path / "m.txt"
    env = runs.environment(XLADEV_EVENT_LOG=str(log), PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(debug),
                           XLA_METRICS_FILE=str(metrics))
    process = runs.start([runs.write_script(tmp_path), "0"], env)  # trains until told to stop
    runs.wait_for_line(process, "step 3")
    _, err = _terminate(process)
    assert process.returncode == -signal.SIGTERM, err[-3000:]
    runs.assert_no_traceback(err)
    records = runs.log_records(log)
    end = records[-1]
    assert end["type"] == "end" and end["reason"] == "terminated" and end["signal"] == "SIGTERM", end
    assert end["steps"] == sum(r["type"] == "step" for r in records) >= 4
    summary = debug.read_text()
    assert "xladev summary: " in summary and summary.endswith("=" * 80 + "\n")
    # The summary says how the run ended, so the debug log alone tells a stopped run from a finished one.
    assert "\nxladev summary: Ended: terminated by SIGTERM\n" in summary, summary
    first = load(str(debug)).findings[0]
    assert first.rule == "unfinished-run" and first.title == f"The run did not finish: terminated by SIGTERM in step {end['steps']}"
    report = runs.xladev_command("report", str(log))
    assert report.returncode == 0 and "the log ended (terminated by SIGTERM)" in report.stdout, report.stdout
    # The report leads with it: the run did not finish, where it was, and its last graph.
    assert "ERROR  1 problem found. Most important: The run did not finish" in report.stdout, report.stdout
    first = load(str(log)).findings[0]
    assert first.rule == "unfinished-run" and first.severity == "error" and first.numbers["steps"] == end["steps"]
    assert any(line.startswith("last graph: ") and "train.py:" in line for line in first.evidence), first.evidence
    report = runs.xladev_command("report", str(metrics))
    assert report.returncode == 0 and "Parse warnings" not in report.stdout, report.stdout



_SELF_TERMINATED = textwrap.dedent("""
    import os, signal, time, torch, xladev
    x = torch.ones(2, device=xladev.device())
    step = 0
    while True:  # steps as fast as it can, before and after the signal, until the signal ends it
        x = x + 1
        xladev.mark_step()
        step += 1
        if step == 4:
            os.kill(os.getpid(), signal.SIGTERM)
""")


def test_the_outputs_end_where_sigterm_came_though_the_loop_runs_on(tmp_path):
    # Regression: the end-of-run output is written on a thread of its own while the main thread runs on, so
    # the event log's end record and the PT_XLA_DEBUG summary, written one after the other, counted different
    # steps (6 and 5 in a CI run). The run is sealed when the signal comes: both say the 4 steps before it.
    log, debug = tmp_path / "run.jsonl", tmp_path / "debug.txt"
    env = runs.environment(XLADEV_EVENT_LOG=str(log), PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(debug))
    done = runs.run([runs.write_script(tmp_path, _SELF_TERMINATED)], env, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr[-3000:]
    records = runs.log_records(log)
    end = records[-1]
    assert (end["type"], end["reason"], end["steps"]) == ("end", "terminated", 4), end
    assert sum(r["type"] == "step" for r in records) == 4
    summary = debug.read_text()
    assert "\nxladev summary: 4 steps, " in summary, summary[-2000:]
    assert load(str(debug)).findings[0].title == "The run did not finish: terminated by SIGTERM in step 4"


_BUSY = textwrap.dedent("""
    import hashlib, torch, xladev
    x = torch.ones(2, device=xladev.device())
    for step in range(4):
        x = x + 1
        xladev.mark_step()
    print("busy", flush=True)
    # Minutes in C with the GIL released, as a long XLA compile is: Python runs no signal handler until it returns.
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 2_000_000_000)
""")


def test_sigterm_is_handled_at_once_while_the_main_thread_is_busy_in_c(tmp_path):
    log = tmp_path / "run.jsonl"
    process = runs.start([runs.write_script(tmp_path, _BUSY)], runs.environment(XLADEV_EVENT_LOG=str(log)))
    runs.wait_for_line(process, "busy")
    time.sleep(0.2)  # well inside the long call
    start = time.monotonic()
    _, err = _terminate(process, timeout=20)
    assert process.returncode == -signal.SIGTERM and time.monotonic() - start < 15, err[-3000:]
    end = runs.log_records(log)[-1]
    assert (end["type"], end["reason"], end["signal"]) == ("end", "terminated", "SIGTERM")


_HANDLER = textwrap.dedent("""
    import signal, sys, torch
    mode = sys.argv[1]

    def mine(signum, frame):
        print("script handler", flush=True)
        sys.exit(7)

    if mode == "installed before xladev":
        signal.signal(signal.SIGTERM, mine)
    import xladev
    x = torch.ones(2, device=xladev.device())
    if mode == "installed after xladev":
        signal.signal(signal.SIGTERM, mine)
    if mode == "installed after, chaining":
        previous = signal.signal(signal.SIGTERM, lambda s, f: (print("script handler", flush=True), previous(s, f)))
    step = 0
    while True:
        x = x + 1
        xladev.mark_step()
        if step == 3:
            print("step 3", flush=True)
        step += 1
""")


@pytest.mark.parametrize("mode, status, end", [
    ("installed before xladev", 7, {"reason": "exit", "signal": "SIGTERM"}),  # chained to: it decides
    ("installed after xladev", 7, {"reason": "exit"}),  # it replaced xladev's, and ended the run with sys.exit
    ("installed after, chaining", -signal.SIGTERM, {"reason": "terminated", "signal": "SIGTERM"}),
])
def test_a_sigterm_handler_of_the_script_still_decides(tmp_path, mode, status, end):
    log = tmp_path / "run.jsonl"
    process = runs.start([runs.write_script(tmp_path, _HANDLER), mode], runs.environment(XLADEV_EVENT_LOG=str(log)))
    runs.wait_for_line(process, "step 3")
    out, err = _terminate(process)
    assert process.returncode == status, err[-3000:]
    assert "script handler" in out
    record = runs.log_records(log)[-1]
    assert record["type"] == "end" and {k: record.get(k) for k in ("reason", "signal")} == {"signal": None, **end}


_FORKED = textwrap.dedent("""
    import multiprocessing, os, signal, time, torch, xladev
    fork = multiprocessing.get_context("fork")

    def child(ready):
        ready.set()
        time.sleep(60)

    x = torch.ones(2, device=xladev.device())
    for step in range(3):
        x = x + 1
        xladev.mark_step()
    ready = fork.Event()
    worker = fork.Process(target=child, args=(ready,))
    worker.start()
    assert ready.wait(60)
    os.kill(worker.pid, signal.SIGTERM)  # as a DataLoader ends a worker that does not stop
    worker.join(30)
    for step in range(3):
        x = x + 1
        xladev.mark_step()
    time.sleep(0.5)  # time for a parent that (wrongly) took the child's signal for its own to act on it
    print("worker exit code", worker.exitcode, flush=True)
""")


def test_sigterm_to_a_forked_child_ends_the_child_only(tmp_path):
    log = tmp_path / "run.jsonl"
    done = runs.run([runs.write_script(tmp_path, _FORKED)], runs.environment(XLADEV_EVENT_LOG=str(log)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"worker exit code {-signal.SIGTERM}" in done.stdout  # it died by the signal, writing nothing of ours
    records = runs.log_records(log)
    assert sum(r["type"] == "end" for r in records) == 1 and records[-1] == {**records[-1], "reason": "exit"}
    assert "signal" not in records[-1] and sum(r["type"] == "step" for r in records) == 6


_FORK_STORM = textwrap.dedent("""
    import os, signal, threading, time, torch, xladev
    x = torch.ones(2, device=xladev.device())
    x = x + 1
    xladev.mark_step()

    def storm():  # on a thread, as DeviceLoader's loader thread forks a DataLoader's workers
        for _ in range(100):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            os.kill(pid, signal.SIGTERM)  # at once: before the child's after-fork hooks, often
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status

    thread = threading.Thread(target=storm)
    thread.start()
    thread.join()
    time.sleep(0.5)  # time for a parent that (wrongly) took a child's signal for its own to act on it
    print("parent alive", flush=True)
""")


def test_sigterm_right_after_a_fork_never_reaches_the_parent(tmp_path):
    # Regression: until the child's after-fork hook ran, it had Python's handler and the parent's wakeup fd,
    # so a worker terminated at once ended the parent (3 runs out of 3 before the fix).
    log = tmp_path / "run.jsonl"
    done = runs.run([runs.write_script(tmp_path, _FORK_STORM)], runs.environment(XLADEV_EVENT_LOG=str(log)))
    assert done.returncode == 0 and "parent alive" in done.stdout, done.stderr[-3000:]
    end = runs.log_records(log)[-1]
    assert end["type"] == "end" and end["reason"] == "exit" and "signal" not in end


_BIG_COMPILE = textwrap.dedent("""
    import torch, xladev
    dev = xladev.device()
    x = torch.ones(4, device=dev)
    for step in range(3):
        x = x * 1.5 + 1
        xladev.mark_step()
    y = torch.ones(64, 64, device=dev)
    for i in range(1500):  # one graph that takes XLA many seconds to compile
        y = torch.sin(y @ y * (1.0 + i * 1e-6)) + i
    xladev.mark_step()
    print("compiled", flush=True)
""")


def _big_compile_started(log) -> bool:
    """Whether the log has the compile start of step 3's graph (the big one)."""
    return any(r["type"] == "compile_start" and r["step"] == 3 for r in runs.log_records(log, cut_ok=True))


def test_sigkill_while_compiling_leaves_every_complete_record_readable(tmp_path):
    log, metrics, debug = tmp_path / "run.jsonl", tmp_path / "m.txt", tmp_path / "debug.txt"
    process = runs.start([runs.write_script(tmp_path, _BIG_COMPILE)],
                         runs.environment(XLADEV_EVENT_LOG=str(log), XLA_METRICS_FILE=str(metrics),
                                          PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=str(debug)))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if log.exists() and _big_compile_started(log):
                break  # its start record is written at once
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        out, _ = process.communicate()
    assert "compiled" not in out  # it was killed inside the compile
    records = runs.log_records(log, cut_ok=True)
    assert [r["type"] for r in records if r["type"].startswith("compile") and r.get("step") == 3] == ["compile_start"]
    assert sum(r["type"] == "step" for r in records) == 3 and not any(r["type"] == "end" for r in records)
    report = runs.xladev_command("report", str(log))
    assert report.returncode == 0 and "no end record" in report.stdout, report.stdout
    first = load(str(log)).findings[0]  # the run did not finish: killed in step 3, compiling its graph
    assert first.rule == "unfinished-run" and "no end record" in first.title and first.numbers["steps"] == 3
    assert any("its compile had started and never ended" in line for line in first.evidence), first.evidence
    steps = metrics.read_text().count("[MetricsData; step=")
    assert steps == 3
    report = runs.xladev_command("report", str(metrics))
    assert report.returncode == 0 and "(XLA_METRICS_FILE, 3 step records)" in report.stdout, report.stdout
    # xladev's debug log has no summary: nothing lived to write it. Alone, it says the run did not finish.
    first = load(str(debug)).findings[0]
    assert first.rule == "unfinished-run" and "no end record" in first.title and first.numbers["steps"] == 3


def test_a_killed_runs_level_1_debug_log_says_it_stopped_without_claiming_a_step(tmp_path):
    # PT_XLA_DEBUG_LEVEL=1 prints compile analyses only: after its one compile, such a log cannot tell step 0 from
    # step 300, so the finding names no step (it said "before its first step ended" of a run killed in step 300).
    debug = tmp_path / "debug.txt"
    process = runs.start([runs.write_script(tmp_path), "0"],
                         runs.environment(PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(debug)))
    try:
        runs.wait_for_line(process, "step 20")
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.communicate()
    text = debug.read_text()
    assert "Compilation Analysis" in text and "Execution Analysis" not in text and "xladev summary" not in text
    first = load(str(debug)).findings[0]
    assert first.rule == "unfinished-run", [f.rule for f in load(str(debug)).findings]
    assert first.title == ("The run did not finish: its log stops after its last compile with no end record "
                           "(killed, or still running)")
    assert "steps" not in first.numbers
    assert any("its log counts no step" in line for line in first.evidence), first.evidence


def test_freeing_a_device_tensor_runs_no_python_frame(dev):
    # Why the script's sys.exit above is never lost: a signal handler runs between Python bytecodes, and one that
    # raises inside a finalizer is printed as "Exception ignored" and dropped, so the run went on after SIGTERM
    # (about once in a few runs, when the signal landed in XlaTensor.__del__). Freeing must run no Python frame.
    import sys

    import torch

    frames = []
    doomed = torch.ones(3, device=dev) + 1

    def tracer(frame, event, arg):
        if event == "call":
            frames.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        return None

    sys.settrace(tracer)
    try:
        del doomed
    finally:
        sys.settrace(None)
    assert frames == []


_READS_IN_SETUP_THEN_KILLED = textwrap.dedent("""
    import os, signal, torch, xladev
    dev = xladev.device()
    w = torch.ones(4, device=dev)
    for step in range(8):
        w = w * 0.5 + 1
        if step == 0:  # set-up reads, as DDP's constructor and first forward make
            for _ in range(3):
                w.sum().item()
        xladev.mark_step()
    print("trained", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_killed_runs_debug_log_says_it_did_not_finish(tmp_path):
    """kill -9 leaves xladev's PT_XLA_DEBUG log without its summary. Alone, that log says the run did not finish,
    at its last step."""
    debug = tmp_path / "debug.txt"
    done = runs.run([runs.write_script(tmp_path, _READS_IN_SETUP_THEN_KILLED)],
                    runs.environment(PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=str(debug)))
    assert done.returncode == -signal.SIGKILL and "trained" in done.stdout, done.stderr[-3000:]
    text = debug.read_text()
    assert "xladev summary" not in text and "TransferFromDeviceTime too frequent: 3 counts during 1 steps" in text
    report = load(str(debug))
    first = report.findings[0]
    assert first.rule == "unfinished-run" and first.numbers["steps"] == 8, [(f.rule, f.title) for f in report.findings]
    assert "its log stops in step 8 with no end record" in first.title
    assert any(line.startswith("last graph: ") and "train.py:" in line for line in first.evidence), first.evidence
