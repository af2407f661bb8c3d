"""An exception in an asynchronous step closure is never lost, even in the last step.

As in PyTorch/XLA it is re-raised at the next barrier or `wait_device_ops()` (tests/runtime/test_errors.py);
a script that ends before either fails at exit: the closure's traceback on stderr, exit status 1.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.faults import runs

_LAST_STEP = textwrap.dedent("""
    import sys, torch
    {imports}

    def check_loss(loss):
        raise ValueError("closure failed at the last step")

    x = torch.ones(2, device=DEVICE)
    for step in range(3):
        x = x + 1
        if step == 2:
            ADD(check_loss, (x,), run_async=True)
        SYNC()
    if sys.argv[1] == "wait":
        try:
            WAIT()
        except ValueError as exc:
            print("wait_device_ops raised:", exc, flush=True)
    print("end of script", flush=True)
""")
_XLADEV = ("import xladev\nDEVICE = xladev.device()\nADD, SYNC, WAIT = xladev.add_step_closure, xladev.mark_step, "
           "xladev.wait_device_ops")
_TORCH_XLA = ("import torch_xla, torch_xla.core.xla_model as xm\nDEVICE = torch_xla.device()\n"
              "ADD, SYNC, WAIT = xm.add_step_closure, xm.mark_step, xm.wait_device_ops")


def _script(tmp_path, imports: str) -> str:
    return runs.write_script(tmp_path, _LAST_STEP.replace("{imports}", imports))


def test_a_closure_that_fails_in_the_last_step_fails_the_process_at_exit(tmp_path):
    log = tmp_path / "run.jsonl"
    done = runs.run([_script(tmp_path, _XLADEV), "end"], runs.environment(XLADEV_EVENT_LOG=str(log)))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "end of script" in done.stdout  # the script itself ran to its end
    err = done.stderr
    assert err.count("xladev: an asynchronous step closure (add_step_closure(..., run_async=True)) raised") == 1, err
    # The closure's own traceback: its frame, and its exception last.
    assert ', in check_loss\n    raise ValueError("closure failed at the last step")' in err, err
    assert err.rstrip().endswith("ValueError: closure failed at the last step"), err
    assert runs.log_records(log)[-1]["type"] == "end"  # the other exit handlers ran all the same


@pytest.mark.parametrize("api, command", [("xladev", []), ("torch_xla", ["-m", "xladev_cli", "run"])])
def test_wait_device_ops_raises_it_and_nothing_is_told_again_at_exit(tmp_path, api, command):
    script = _script(tmp_path, _XLADEV if api == "xladev" else _TORCH_XLA)
    done = runs.run([*command, script, "wait"], runs.environment())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wait_device_ops raised: closure failed at the last step" in done.stdout
    assert "end of script" in done.stdout and "closure" not in done.stderr, done.stderr[-3000:]
