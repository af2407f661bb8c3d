"""One run's event log and its PT_XLA_DEBUG log fold into the same state: the debug log's blocks and lines are
lifted to the records they were written from (executions by site, cause and graph; the steps), never the other way
round."""

from __future__ import annotations

import textwrap

import pytest

from tests.faults import runs
from xladev.report import load
from xladev.schema.sites import short_site

TRAIN = textwrap.dedent("""
    import torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(8):
        x = torch.randn(4 + step % 2, 16).to(dev)   # two shapes
        loss = model(x).pow(2).mean()
        if step % 3 == 0:
            print(loss.item())                       # a read before the barrier: its own execution
        loss.backward(); opt.step(); opt.zero_grad()
        xladev.mark_step()
""")


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lifted")
    env = runs.environment(XLADEV_EVENT_LOG=str(tmp / "run.jsonl"), PT_XLA_DEBUG_LEVEL="2",
                           PT_XLA_DEBUG_FILE=str(tmp / "debug.txt"), XLA_METRICS_FILE=str(tmp / "metrics.txt"))
    done = runs.run([runs.write_script(tmp, TRAIN)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(load(str(tmp / name)).sources[0].run for name in ("run.jsonl", "debug.txt", "metrics.txt"))


def _causes(state) -> dict:
    return {(short_site(site), cause, graph): entry[0] for (site, cause, graph), entry in state.causes.by_key.items()}


def test_the_debug_logs_executions_fold_as_the_event_logs(states):
    from_log, from_debug, _ = states
    assert from_debug.executions == from_log.executions == sum(_causes(from_log).values())
    assert _causes(from_debug) == _causes(from_log)
    reads = {key: n for key, n in _causes(from_log).items() if "access tensor value" in key[1]}
    # steps 0, 3 and 6 read the loss before their barrier, at its line
    assert sum(reads.values()) == 3 and {site for site, _, _ in reads} == {"train.py:11"}, _causes(from_log)


def test_the_debug_logs_step_barriers_are_the_event_logs_steps(states):
    from_log, from_debug, _ = states
    assert from_debug.steps == from_log.steps == 8  # each barrier ran a graph, so each left a block


def _compiled(state) -> list[tuple]:
    return [(e.graph_hash, short_site(e.record.site), e.cause, e.inputs, e.outputs, e.changes, e.steps_before)
            for e in state.compiled]


def test_the_debug_logs_compiles_fold_as_the_event_logs(states):
    """Each Compilation Analysis block is its compile record: graph, line, cause, signature, what changed and its
    step, and the sizes of its Post Compilation block, in the record's keys."""
    from_log, from_debug, _ = states
    assert from_debug.compiles == from_log.compiles == len(from_log.compiled)
    assert _compiled(from_debug) == _compiled(from_log)
    changed = [e for e in from_log.compiled if e.changes]
    # the second shape recompiled the step's graphs, saying what changed: the batch's rows
    assert changed and any("(dim 0: 4 -> 5)" in change for e in changed for change in e.changes), _compiled(from_log)
    # a debug log names a compile's step only in xladev's recompilation cause; the others are its barriers counted
    assert [e.step_known for e in from_debug.compiled] == [bool(e.changes) for e in from_debug.compiled]
    for printed, recorded in zip(from_debug.compiled, from_log.compiled):
        assert printed.record.memory.keys() == recorded.record.memory.keys() != set()
        for key, size in recorded.record.memory.items():  # printed in GB with six decimals
            assert abs(printed.record.memory[key] - size) <= 0.5e-6 * 1024**3
    assert ([(short_site(r.site), r.graph_hash, r.previous, r.changes, r.step) for r in from_debug.recompilations]
            == [(short_site(r.site), r.graph_hash, r.previous, r.changes, r.step) for r in from_log.recompilations])
    assert ([(short_site(site), n) for site, n, _ in from_debug.compiles_per_site()]
            == [(short_site(site), n) for site, n, _ in from_log.compiles_per_site()])


def test_the_metrics_files_last_report_is_the_event_logs_counters(states):
    """A metrics report is lifted to its record (`metrics_report`) and folded: its counters and metrics are the
    state's, those the event log's records count (the run reads nothing after its last barrier)."""
    from_log, _, from_metrics = states
    assert from_metrics.counters == from_log.counters and from_metrics.counters["MarkStep"] == 8
    assert {name: m.count for name, m in from_metrics.metrics.items()} == {
        name: m.count for name, m in from_log.metrics.items()}
    for name, metric in from_metrics.metrics.items():
        if metric.kind == "time":  # printed to the nanosecond
            assert abs(metric.total - from_log.metrics[name].total) <= 1, name
