"""The graphs that failed fold from their records, whichever input held them: the PT_XLA_DEBUG lines the runtime
writes for a failure (`debug_text.failure_lines`, the explainer, the saved HLO) lift to the same failures and
out-of-memory messages as the event log's records."""

from __future__ import annotations

from xladev.analysis.run_state import RunState
from xladev.dumps.debug_analysis import DebugLog
from xladev.schema import debug_text, records as rec

_OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes."
_RUN = [  # one run's failures, as its event log holds them
    rec.CompileFailed(step=2, hash="a1b2c3", message="INVALID_ARGUMENT: dot has mismatched shapes",
                      hlo_path="/tmp/hlo/a1b2c3.hlo.txt"),
    rec.ExecuteFailed(step=5, hash="d4e5f6", message=f"{_OOM}\n  the graph needs 4.00GB\n  live before it: 1.00GB",
                      hlo_path="/tmp/hlo/d4e5f6.hlo.txt"),
    rec.ExecuteFailed(step=6, hash="d4e5f6", message=_OOM, hlo_path="/tmp/hlo/d4e5f6.hlo.txt"),
    rec.ExecuteFailed(step=7, hash="0f0f0f", message="INTERNAL: the device was lost", hlo_path=""),
]


def _debug_text(record) -> str:  # what the PT_XLA_DEBUG sink writes for it
    if isinstance(record, rec.CompileFailed):
        return debug_text.failure_lines("Compilation Analysis: ", record.hash, debug_text.FAILED_TO_COMPILE,
                                        record.message.splitlines()[0], record.hlo_path)
    verb = debug_text.FAILED_WHILE_RUNNING if record.hlo_path else debug_text.COULD_NOT_RUN
    return debug_text.failure_lines("Execution Analysis: ", record.hash, verb, record.message, record.hlo_path)


def _folded(failures) -> tuple:
    graphs = [(f.kind, f.facts(), [line.strip() for line in f.record.message.split("\n")], f.out_of_memory is not None)
              for f in failures.graphs]
    memory = [(e["message"], e["count"], e.get("hash"), e.get("hlo_path"), [d.strip() for d in e.get("details", ())])
              for e in failures.out_of_memory]
    return graphs, memory


def test_the_event_log_and_the_debug_log_of_a_run_fold_the_same_failures():
    state = RunState()
    for line, record in enumerate(_RUN, start=1):
        state.feed(record, line)
    log = DebugLog(lambda *args, **kwargs: None)
    lines = "".join(_debug_text(record) for record in _RUN).split("\n")
    for line, text in enumerate(lines, start=1):
        log.feed(line, text)
    assert _folded(log.run.failures) == _folded(state.failures)
    graphs, memory = _folded(state.failures)
    assert [kind for kind, *_ in graphs] == ["compile", "execute", "execute", "execute"]
    assert [failed for *_, failed in graphs] == [False, True, True, False]
    # One out-of-memory message seen twice, with the first failure's graph, HLO and explainer.
    assert memory == [(_OOM, 2, "d4e5f6", "/tmp/hlo/d4e5f6.hlo.txt", ["the graph needs 4.00GB",
                                                                       "live before it: 1.00GB"])]


def test_failures_of_a_kind_leave_out_those_that_ran_out_of_memory():
    state = RunState()
    for line, record in enumerate(_RUN, start=1):
        state.feed(record, line)
    failed, ran_out = state.failures.of_kind("execute")
    assert [f.record.hash for f in failed] == ["0f0f0f"] and ran_out == 2
    failed, ran_out = state.failures.of_kind("compile")
    assert [f.facts() for f in failed] == [{"hash": "a1b2c3", "message": "INVALID_ARGUMENT: dot has mismatched shapes",
                                            "hlo_path": "/tmp/hlo/a1b2c3.hlo.txt", "site": ""}] and ran_out == 0
