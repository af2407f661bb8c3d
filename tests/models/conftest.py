"""The zoo's shared pieces: one parity run per case per session, and the table at the end of the run.

A case's parity run (`parity.check_case`) is the expensive part (two compiles); tests that look at
the same run from different sides (test_transformers and test_tied_weights on GPT-2, say) share it.
The terminal summary lists each case that ran: per kind of check the worst error / allowed, its first
step's time (trace, lower, compile and run), the compile time in it, and the steady step on xla
(waiting for each step's graph). tools/bench/bench_models.py times steps against eager properly: here
the CPU runs share the cores with XLA's threads still winding down.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers

from tests.models import zoo
from tests.models.parity import Summary, check_case

transformers.logging.set_verbosity_error()  # "loss_type=None" and similar notes on every build

_summaries: dict[str, Summary] = {}


def summary_of(name: str, compiled: bool = False) -> Summary:
    """The parity run of zoo case `name` (through torch.compile when `compiled`), run on first use and kept."""
    key = f"{name} (compiled)" if compiled else name
    if key not in _summaries:
        if compiled:
            case = dataclasses.replace(zoo.ALL[name], **zoo.COMPILED_CHANGES.get(name, {}))
            # TorchDynamo skips nn.LSTM/GRU/RNN (a graph break) unless told to trace them.
            with torch._dynamo.config.patch(allow_rnn=True):
                _summaries[key] = check_case(case, compiled=True)
        else:
            _summaries[key] = check_case(zoo.ALL[name])
    return _summaries[key]


@pytest.fixture
def parity(record_property):
    """Runs (or reuses) a case's parity checks, records its times as test properties, returns the Summary."""

    def run(name: str, compiled: bool = False) -> Summary:
        summary = summary_of(name, compiled)
        xla = summary.xla
        record_property("first_step_s", round(xla.step_seconds[0], 3))
        record_property("first_step_compile_s", round(xla.compile_seconds[0], 3))
        record_property("steady_step_xla_s", round(xla.steady_seconds, 4))
        record_property("worst_check", f"{summary.worst.check}: {summary.worst.ratio:.3g} of allowed")
        return summary

    return run


def assert_parity(summary: Summary) -> None:
    """Fails with every failed check of the case, one per line."""
    assert not summary.failures, f"{summary.name}:\n  " + "\n  ".join(summary.failures)


# Table columns: a title and the checks whose worst error/allowed ratio it shows.
_COLUMNS = (("loss", ("loss",)), ("grad", ("grad",)), ("step 1", ("state after step 1",)),
            ("final", ("final reach", "final rms")), ("resumed", ("state after a resumed step",)),
            ("eval", ("eval output",)))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _summaries:
        return
    write = terminalreporter.write_line
    terminalreporter.section("model zoo: xla against eager CPU (float64 oracle); checks as worst error / allowed")
    write(f"{'case':<32}{'status':<10}" + "".join(f"{title:>9}" for title, _ in _COLUMNS)
          + f"{'first step':>12}{'compile':>9}{'xla step':>10}")
    for name, s in _summaries.items():
        ratios = []
        for _, checks in _COLUMNS:
            found = [s.comparisons[c].ratio for c in checks if c in s.comparisons]
            ratios.append(f"{max(found):>9.1e}" if found else f"{'-':>9}")
        status = "ok" if not s.failures else f"{len(s.failures)} failed"
        write(f"{name:<32}{status:<10}" + "".join(ratios) + f"{s.xla.step_seconds[0]:>10.2f} s"
              f"{s.xla.compile_seconds[0]:>7.2f} s{s.xla.steady_seconds * 1e3:>7.1f} ms")
