"""A graph that keeps growing with no barrier is warned about at the user's line, in PT_XLA_DEBUG and the report.

Also: very deep graphs (a long chain feeding a reduction) compile and run instead of crashing XLA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import xladev
from tests.source_lines import line_of
from xladev.runtime.graph.op_ledger import GraphGrowthWarning


def _grow(ops: int):
    x = torch.zeros(4, device=xladev.device())
    for _ in range(ops):
        x = x + 1.5  # growth-site
    return x


@pytest.fixture
def fresh_history(monkeypatch):
    """The limit follows the largest graph this process ran; earlier tests' graphs must not raise it."""
    from xladev.runtime.graph.op_ledger import recorder

    xladev.mark_step()
    monkeypatch.setattr(recorder, "largest_ops", 0)
    monkeypatch.setattr(recorder, "warned_sites", set())  # each test's sites warn afresh


@pytest.fixture
def growth_events():
    """The GraphGrowing events' op counts, as the event log and PT_XLA_DEBUG receive them."""
    from xladev.events import GraphGrowing, bus

    seen: list[int] = []
    subscription = bus.subscribe(lambda event: seen.append(event.ops), GraphGrowing)
    yield seen
    bus.unsubscribe(subscription)


def test_warns_once_at_the_users_line_and_the_events_follow_the_growth(fresh_history, growth_events):
    with xladev.config.override(graph_growth_warning=1000), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = _grow(4500)
        xladev.mark_step()
    growth = [w for w in caught if issubclass(w.category, GraphGrowthWarning)]
    # One Python warning for the line; the events (event log, PT_XLA_DEBUG) at each doubling.
    assert [int(str(w.message).split(" ops")[0].split(": ")[1].replace(",", "")) for w in growth] == [1000]
    assert growth_events == [1000, 2000, 4000]
    assert growth[0].filename == __file__ and growth[0].lineno == line_of(__file__, "growth-site")
    assert "mark_step()" in str(growth[0].message) and "test_graph_growth.py:" in str(growth[0].message)
    torch.testing.assert_close(x.cpu(), torch.full((4,), 4500 * 1.5))


def test_a_training_loop_with_barriers_never_warns_and_the_limit_follows_the_largest_step(fresh_history):
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(6)]).to(xladev.device())
    opt = torch.optim.AdamW(model.parameters())
    x = torch.ones(2, 8, device=xladev.device())
    with xladev.config.override(graph_growth_warning=150), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()  # a step records more than 150 ops: the first step warns, later ones must not
            xladev.mark_step()
    growth = [w for w in caught if issubclass(w.category, GraphGrowthWarning)]
    assert len(growth) <= 2, [str(w.message) for w in growth]
    assert all("since step" in str(w.message) for w in growth)
    with xladev.config.override(graph_growth_warning=0), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _grow(3000).cpu()
    assert not [w for w in caught if issubclass(w.category, GraphGrowthWarning)]


SCRIPT = textwrap.dedent("""
    import torch, xladev
    x = torch.zeros(4, device=xladev.device())
    for i in range(1200):
        x = x * 0.5 + 1.0  # the unbounded loop
    print(float(x.sum()))
""")


def test_pt_xla_debug_the_event_log_and_the_report_say_it(tmp_path):
    script = tmp_path / "grow.py"
    script.write_text(SCRIPT)
    debug, events = tmp_path / "debug.txt", tmp_path / "run.events.jsonl"
    env = dict(os.environ, XLADEV_GRAPH_GROWTH_WARNING="1000", PT_XLA_DEBUG_LEVEL="1",
               PT_XLA_DEBUG_FILE=str(debug), XLADEV_EVENT_LOG=str(events))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "GraphGrowthWarning" in run.stderr and "grow.py:5" in run.stderr
    lines = [line for line in debug.read_text().splitlines() if "Graph growing without a barrier" in line]
    # 2,400 ops: warned at 1,000 and again at twice that.
    assert len(lines) == 2 and all(line.startswith("pt-xla-profiler: ") for line in lines)
    assert "1,000 ops" in lines[0] and "2,000 ops" in lines[1]
    records = [json.loads(line) for line in events.read_text().splitlines()]
    growing = [r for r in records if r.get("type") == "graph_growing"]
    assert [r["ops"] for r in growing] == [1000, 2000] and growing[0]["frame"]["line"] == 5
    for source in (debug, events):
        out = subprocess.run([sys.executable, "-m", "xladev_cli", "report", "-f", "json", str(source)],
                             capture_output=True, text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
                                 os.path.dirname(os.path.abspath(__file__)))))
        findings = json.loads(out.stdout)["findings"]
        found = [f for f in findings if f["rule"] == "graph-growing"]
        assert found, (source.name, [f["rule"] for f in findings])
        assert found[0]["numbers"]["ops"] == 2000 and found[0]["numbers"]["warnings"] == 2
        assert "grow.py:5" in found[0]["title"]


def test_deep_chains_are_cut_into_bounded_fusions(monkeypatch):
    from xladev.runtime.lowering import graph_lowering

    monkeypatch.setattr(graph_lowering, "FUSION_DEPTH_CUT", 64)
    xladev.mark_step()
    x = _grow(300)
    total = x.sum()
    hlo = xladev.debug.get_tensors_hlo([total])
    assert hlo.count(" opt-barrier(") == 300 // 64  # the instructions (their names and operands say it too)
    assert total.item() == pytest.approx(4 * 300 * 1.5, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("ops", [30_000])
def test_a_very_deep_chain_into_a_reduction_compiles_and_runs(ops):
    # Without cutting the chain, XLA's CPU compiler overflowed its thread's stack here (a segfault).
    xladev.mark_step()
    with xladev.config.override(graph_growth_warning=0):
        x = _grow(ops)
        total = x.sum()
        assert total.item() == pytest.approx(4 * ops * 1.5, rel=1e-6)


def test_an_optimizer_stepping_twice_in_one_graph_warns_whatever_the_graph_size(fresh_history):
    """A missing barrier shows as the same optimizer stepping again before any graph ran, even in a small model
    far below the ops threshold; one barrier per step never warns."""
    model = torch.nn.Linear(4, 2).to(xladev.device())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.ones(3, 4, device=xladev.device())

    def train(steps: int, barrier: bool) -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(steps):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()  # optimizer-step
                if barrier:
                    xladev.mark_step()
            xladev.mark_step()
        return [w for w in caught if issubclass(w.category, GraphGrowthWarning)]

    assert train(3, barrier=True) == []
    growth = train(3, barrier=False)
    assert growth and growth[0].lineno == line_of(__file__, "optimizer-step"), [str(w.message) for w in growth]
    # A CPU optimizer is none of the device's business.
    cpu = torch.nn.Linear(2, 2)
    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            cpu(torch.ones(1, 2)).sum().backward()
            cpu_opt.step()
    assert not [w for w in caught if issubclass(w.category, GraphGrowthWarning)]


def test_a_long_loop_without_a_barrier_warns_once_not_once_per_step(fresh_history, growth_events):
    """The issue's 1000-step loop printed 999 warnings, one per optimizer step: one line, one warning, and
    events only at each doubling of the graph (a handful, however long the loop)."""
    model = torch.nn.Linear(4, 2).to(xladev.device())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.ones(3, 4, device=xladev.device())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(40):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()  # loop-step
        xladev.mark_step()
    growth = [w for w in caught if issubclass(w.category, GraphGrowthWarning)]
    assert len(growth) == 1 and growth[0].lineno == line_of(__file__, "loop-step"), [str(w.message) for w in growth]
    # The second step warned; then every doubling of the pending ops: 40 steps of ~20 ops give 5 or so.
    assert 1 <= len(growth_events) <= 8, growth_events
    assert all(later >= 2 * earlier for earlier, later in zip(growth_events, growth_events[1:])), growth_events
