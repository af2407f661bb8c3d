"""What a right diagnosis of each real torch_xla scenario says, read from a log the adapter wrote.

The ground truth is tests/fixtures/torch_xla/README.md's (what each scenario does wrong, and how often); the
report of PyTorch/XLA's own outputs of the same scenarios is held to the same by tests/report. Shared by the
recorded logs' tests (`make test`) and the live ones (`make test-torch-xla`).
"""

from __future__ import annotations

import asyncio
import dataclasses

from xladev import analysis


@dataclasses.dataclass(frozen=True)
class Expected:
    """One scenario's right diagnosis.

    Attributes:
      script: the fixture script that runs it (`scenarios.py` or `mistakes.py`).
      verdict: the report's verdict.
      rule: the first problem's rule; None for a healthy run.
      numbers: numbers the first problem (or, when healthy, the healthy finding) must hold.
      site: the user's line the first problem names.
      also: rule -> how many findings of that rule the report also has.
      scenario: the script's argument, when not the entry's name.
      graphs: run with `xladev attach --graphs` (PyTorch/XLA's graph dumps: what changed at a recompilation).
      changed: what the first problem says changed at the recompilation (with `graphs`).
    """

    script: str
    verdict: str
    rule: str | None
    numbers: dict
    site: str | None = None
    also: dict = dataclasses.field(default_factory=dict)
    scenario: str | None = None
    graphs: bool = False
    changed: str | None = None


EXPECTED = {
    "healthy": Expected("scenarios.py", "healthy", None, {"steps": 24, "compiles": 1, "transfers": 0}),
    "dynamic_shape": Expected("scenarios.py", "error", "recompilation", {"compiles": 24, "steps": 24},
                              "scenarios.py:22"),
    "item_every_step": Expected("scenarios.py", "warning", "host-transfers",
                                {"transfers": 24, "steps": 24, "item_calls": 24}, "scenarios.py:19"),
    # Both ops run on the CPU every step, and the graphs they split keep recompiling: PyTorch/XLA's own outputs of
    # this run lead with the recompilation too (tests/report), the fallbacks after it.
    "fallback": Expected("scenarios.py", "warning", "recompilation", {"compiles": 13, "steps": 24},
                         also={"cpu-fallback": 2}),
    "no_barrier": Expected("mistakes.py", "warning", "graph-growing", {"graphs": 1, "executions": 1},
                           "mistakes.py:31"),
    # 12 prints, and the final `loss.item()` after the loop: a read of data already on the device, which runs no
    # graph and so is missing from PyTorch/XLA's debug log, but not from its TransferFromDeviceTime samples.
    "print_loss": Expected("mistakes.py", "warning", "host-transfers", {"transfers": 13, "steps": 12, "item_calls": 1},
                           "mistakes.py:29"),
    # The loader also syncs before its first batch and at its end (MarkStep 14), and the final `loss.item()` reads.
    "healthy_loader": Expected("mistakes.py", "healthy", None, {"steps": 14, "compiles": 1, "transfers": 1}),
    "slice_length": Expected("mistakes.py", "error", "recompilation", {"compiles": 12, "steps": 12}),
    # With PyTorch/XLA's graph dumps, what changed is named: the slice's output width (x[:, :20 + step]), and the
    # batch size of the input made on the device (torch.randn(8 + step, 32, device=dev)).
    "slice_length_graphs": Expected("mistakes.py", "error", "recompilation", {"compiles": 12, "steps": 12},
                                    scenario="slice_length", graphs=True,
                                    changed="output shape of xla::select changed: f32[16,30]{1,0} -> f32[16,31]{1,0}"),
    "dynamic_shape_graphs": Expected("scenarios.py", "error", "recompilation", {"compiles": 24, "steps": 24},
                                     scenario="dynamic_shape", graphs=True,
                                     changed="output shape of aten::expand changed: f32[30,32]{1,0} -> f32[31,32]{1,0}"),
}


def _problems(report) -> list[analysis.Finding]:
    return [f for f in report.findings if f.severity in (analysis.WARNING, analysis.ERROR)]


def _text(finding: analysis.Finding) -> str:
    return " ".join([finding.title, finding.detail, *finding.evidence, finding.fix])


def check_report(name: str, report) -> None:
    """Asserts the report of scenario `name`'s adapter log says what EXPECTED says."""
    expected = EXPECTED[name]
    findings = [(f.rule, f.severity, f.title) for f in report.findings]
    assert report.verdict() == expected.verdict, findings
    problems = _problems(report)
    if expected.rule is None:
        assert not problems, findings
        finding = next(f for f in report.findings if f.rule == "healthy")
    else:
        finding = problems[0]
        assert finding.rule == expected.rule, findings
    for key, value in expected.numbers.items():
        assert finding.numbers.get(key) == value, (key, finding.numbers)
    if expected.site:
        assert expected.site in _text(finding), _text(finding)
    if expected.changed:
        assert expected.changed in _text(finding), _text(finding)
        assert "do not name" not in _text(finding)
    elif expected.rule == "recompilation":  # without the dumps, the report says it cannot name the change
        assert "what changed at" not in _text(finding)
    for rule, count in expected.also.items():
        assert sum(f.rule == rule for f in report.findings) == count, findings
    assert "xladev.mark_step" not in finding.fix  # a torch_xla run is told torch_xla's API


def check_tui(name: str, path, version: str = "2.9.0") -> None:
    """Asserts the TUI, headless on the adapter log of `name`, leads with the report's first problem and says
    the run is one of torch_xla `version` (the recorded fixtures': 2.9.0)."""
    from tests.tui.helpers import plain, wait_for
    from textual.widgets import Static
    from xladev_tui.app import XladevTUI
    from xladev_tui.sources import FileTailSource

    expected = EXPECTED[name]

    class CountingTail(FileTailSource):  # the real follower, counting the reads that found nothing new
        empty_reads = 0

        def read(self, timeout: float) -> list[tuple]:
            items = super().read(timeout)
            self.empty_reads += not items
            return items

    async def replay():
        source = CountingTail(str(path), idle_before_check=0.0)
        app = XladevTUI(source, clock=lambda: 0.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: source.empty_reads >= 2 and app.shown.version == app.model.version
                           and app.shown.diagnosis.records >= app.shown.records, timeout=60)
            title = plain(app.query_one("#title-line", Static).content, width=1000)
            return app.shown.diagnosis, title

    diagnosis, title = asyncio.run(replay())
    assert f"torch_xla {version}" in title and "attached" in title, title
    problems = [f for f in diagnosis.findings if f.severity in (analysis.WARNING, analysis.ERROR)]
    if expected.rule is None:
        assert diagnosis.verdict == "healthy" and not problems
    else:
        assert problems and problems[0].rule == expected.rule, [(f.rule, f.title) for f in diagnosis.findings]
