"""The zoo's shared pieces: one parity run per case per session, and the table at the end of the run.

A case's parity run (`parity.check_case`) is the expensive part (two compiles); tests that look at
the same run from different sides (test_transformers and test_tied_weights on GPT-2, say) share it.
The terminal summary lists each case that ran: its worst check as error/allowed, its first step's
time (trace, lower, compile and run), the compile time in it, and the steady step on xla and on CPU.
"""

from __future__ import annotations

import pytest
import transformers

from tests.models import zoo
from tests.models.parity import Summary, check_case

transformers.logging.set_verbosity_error()  # "loss_type=None" and similar notes on every build

_summaries: dict[str, Summary] = {}


def summary_of(name: str) -> Summary:
    """The parity run of zoo case `name`, run on first use and kept for the session."""
    if name not in _summaries:
        _summaries[name] = check_case(zoo.ALL[name])
    return _summaries[name]


@pytest.fixture
def parity(record_property):
    """Runs (or reuses) a case's parity checks, records its times as test properties, returns the Summary."""

    def run(name: str) -> Summary:
        summary = summary_of(name)
        xla = summary.xla
        record_property("first_step_s", round(xla.step_seconds[0], 3))
        record_property("first_step_compile_s", round(xla.compile_seconds[0], 3))
        record_property("steady_step_xla_s", round(xla.steady_seconds, 4))
        record_property("steady_step_cpu_s", round(summary.cpu32.steady_seconds, 4))
        record_property("worst_check", f"{summary.worst.check}: {summary.worst.ratio:.3g} of allowed")
        return summary

    return run


def assert_parity(summary: Summary) -> None:
    """Fails with every failed check of the case, one per line."""
    assert not summary.failures, f"{summary.name}:\n  " + "\n  ".join(summary.failures)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _summaries:
        return
    write = terminalreporter.write_line
    terminalreporter.section("model zoo: xla against eager CPU (float64 oracle)")
    write(f"{'case':<22}{'status':<10}{'worst check: error / allowed':<44}{'first step':>11}{'compile':>9}"
          f"{'xla step':>10}{'cpu step':>10}")
    for name, s in _summaries.items():
        worst = s.worst
        status = "ok" if not s.failures else f"{len(s.failures)} failed"
        write(f"{name:<22}{status:<10}{worst.check[:26]:<27}{worst.observed:8.2g} / {worst.allowed:<8.2g}"
              f"{s.xla.step_seconds[0]:>9.2f} s{s.xla.compile_seconds[0]:>7.2f} s"
              f"{s.xla.steady_seconds * 1e3:>7.1f} ms{s.cpu32.steady_seconds * 1e3:>7.1f} ms")
