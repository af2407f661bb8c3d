"""Findings about the inputs themselves: nothing complete to judge, a damaged file, an unreadable one.

A report never calls a run healthy on evidence it does not have: with no complete record the verdict
is ``unknown`` (`no_complete_record_finding` gives the reason), and a damaged input is judged on the
records before the damage with a warning that says where the damage is.
"""

from __future__ import annotations

from xladev.analysis.general_rules import MORE_OF_THE_RUN
from xladev.analysis.finding_model import WARNING, Finding

# Why an input that is a file of no bytes holds no record (`xladev.report.model.SourceResult.problem`).
EMPTY_FILE = "empty file"

NO_COMPLETE_RECORD = "no-complete-record"

_CHECK_THE_PATH = "Check that the path names the run's metrics file, PT_XLA_DEBUG log or event log. " + MORE_OF_THE_RUN
_UNDAMAGED_COPY = ("Report on an undamaged copy: copy the file again, or compress it only once the run has ended "
                   "(a .gz made while the run still writes is cut off).")


def no_complete_record_finding(problems: list[tuple[str, str, bool]]) -> Finding:
    """Instead of any verdict when no input holds a complete record: the verdict is ``unknown``.

    Args:
      problems: ``(input name, why it holds no complete record, whether it is damaged)`` per input.

    Returns:
      The finding; its title carries the reason, so the report's headline does.
    """
    if len(problems) == 1:
        title = f"No complete record to judge the run by: {problems[0][1]}"
    else:
        title = f"No complete record to judge the run by in any of the {len(problems)} inputs"
    fix = _UNDAMAGED_COPY if any(damaged for _, _, damaged in problems) else _CHECK_THE_PATH
    evidence = [f"{name}: {why}" for name, why, _ in problems]
    if any(why == EMPTY_FILE for _, why, _ in problems):
        # The run's own metrics file is opened at the start and written at each step barrier.
        evidence.append("XLA_METRICS_FILE gets a report at each step barrier: left empty by a run that finished, "
                        "it says no step was ever marked (a loop with no torch_xla.sync() or xladev.mark_step(), "
                        "whose whole run was one graph); the run's PT_XLA_DEBUG log or its printed "
                        "metrics_report() can tell")
    return Finding(NO_COMPLETE_RECORD, WARNING, title,
                   "Nothing in the input shows how the run went, so the report can neither call it healthy nor "
                   "find a problem: the verdict is unknown (and `xladev report` exits with status 2).",
                   fix, evidence=evidence)


def damaged_input_finding(name: str, damage: str, kept: str, line: int) -> Finding:
    """An input whose compression is damaged (cut off or corrupt): judged on what came before the damage.

    Args:
      name: the input's display name.
      damage: what is wrong and where (`xladev.report.inputs`), e.g. ``the gzip data ends early (cut
        off after 5,120 bytes)``.
      kept: what was read before it, e.g. ``12 complete metrics reports``, or ``no complete record``.
      line: the last input line read before the damage.

    Returns:
      A warning: a damaged input is never silently healthy.
    """
    return Finding("damaged-input", WARNING, f"{name} is damaged: {damage}",
                   "The report uses only the complete records before the damage; whatever came after it is lost, "
                   "so the numbers cover the run up to there. Corrupt compressed data can also decode as wrong text "
                   "shortly before the point where the damage is noticed.",
                   _UNDAMAGED_COPY,
                   evidence=[damage, f"read before it: {kept}, up to line {line}"],
                   numbers={"lines_read": line}, sources=[f"{name}:{line}"], subject=name)


def unreadable_input_finding(name: str, problem: str) -> Finding:
    """One input of several that holds nothing readable (binary data, empty): the others are judged.

    Args:
      name: the input's display name.
      problem: why, e.g. ``binary data, not a metrics file or log``.

    Returns:
      A warning: the report covers the other inputs only.
    """
    return Finding("unreadable-input", WARNING, f"{name} could not be read: {problem}",
                   "The report covers the other inputs only.",
                   _CHECK_THE_PATH,
                   evidence=[f"{name}: {problem}"], subject=name)
