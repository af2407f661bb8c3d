"""One run, every combination of its outputs (event log, metrics file, PT_XLA_DEBUG log with xladev's summary): the
same counts and costs wherever the inputs hold them.

The run recompiles for five batch shapes and reads its loss every step, the last read after the last barrier. A
metrics file's last report is at that barrier, so alone it counts one read fewer (the input does not hold the last
one); given with an input that does, the report says the run's number. xladev's summary prints times to three
significant digits: its costs agree to that precision.
"""

from __future__ import annotations

import itertools
import textwrap

import pytest

from tests.faults import runs
from xladev.report import load

TRAIN = textwrap.dedent("""
    import torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(16):
        x = torch.randn(4 + step % 5, 16).to(dev)   # five shapes: recompiles
        loss = model(x).pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
        xladev.mark_step()
        if loss.item() > 100:                        # a read every step, after its barrier
            print("big")
""")
INPUTS = ("log", "metrics", "debug")
SUMMARY_PRECISION = 0.005  # three significant digits, as the summary prints times


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one_number")
    paths, env = runs.all_outputs_environment(tmp)
    done = runs.run([runs.write_script(tmp, TRAIN)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    return paths


def _numbers(outputs, combo) -> dict[str, dict]:
    report = load([str(outputs[name]) for name in combo])
    return {f.rule: f.numbers for f in report.findings}


def test_every_combination_says_the_runs_numbers(outputs):
    exact = _numbers(outputs, ("log",))
    assert set(exact) == {"recompilation", "host-transfers"}
    assert exact["recompilation"]["compiles"] == 5 and exact["host-transfers"]["transfers"] == 16
    for n in (1, 2, 3):
        for combo in itertools.combinations(INPUTS, n):
            numbers = _numbers(outputs, combo)
            assert set(numbers) == set(exact), combo
            for rule, want in exact.items():
                got = numbers[rule]
                counts = ("compiles", "steps", "transfers")
                if combo == ("metrics",) and rule == "host-transfers":
                    # its last report is at the last barrier: the read after it, and its time, are not in this input
                    assert got["transfers"] == want["transfers"] - 1 and got["cost_ns"] < want["cost_ns"], combo
                    assert got["steps"] == want["steps"]
                    continue
                assert {k: got.get(k) for k in counts} == {k: want.get(k) for k in counts}, (combo, rule)
                if "log" in combo or combo == ("metrics",):
                    assert got["cost_ns"] == want["cost_ns"], (combo, rule)  # the same measured spans
                elif got.get("cost_ns") is not None:
                    assert got["cost_ns"] == pytest.approx(want["cost_ns"], rel=SUMMARY_PRECISION), (combo, rule)
