"""`xladev report`: diagnose metrics reports, XLA_METRICS_FILE records and PT_XLA_DEBUG logs.

Exit status: 0 normally; 1 with ``--fail-on`` when a finding reaches that severity (or, for
``--fail-on warning``, when the verdict is ``unknown``); 2 when an input is missing, when no input
holds a complete record (the report is still written, with the verdict ``unknown`` and the reason),
or when the output cannot be written.
"""

from __future__ import annotations

import argparse
import os
import sys

from xladev.errors import UsageError

FORMATS = ("text", "markdown", "json", "html")

EPILOG = """\
inputs are detected automatically: a metrics report (pasted or printed, with or without log
prefixes), an XLA_METRICS_FILE, a PT_XLA_DEBUG log, or any mix; several files make one run.
A path that does not exist but has per-rank files (metrics.txt.0 ... .N) reads all ranks.
Two metrics inputs of different runs are compared (force with --compare, prevent with --single-run).

examples:
  xladev report metrics.txt
  xladev report metrics.txt debug.txt --format html -o report.html
  xladev report before.txt after.txt
  xladev report metrics.txt --fail-on warning   # exit 1 in CI when something is wrong
"""


def _width(text: str) -> int:
    """A text width for argparse: a whole number of columns, at least 20 (narrower cannot hold a table)."""
    try:
        width = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of columns: {text!r}") from None
    if width < 20:
        raise argparse.ArgumentTypeError(f"{width} columns is too narrow: use at least 20")
    return width


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the ``report`` command.

    Args:
      subparsers: the object returned by ``ArgumentParser.add_subparsers``.

    Returns:
      The command's parser.
    """
    parser = subparsers.add_parser(
        "report", help="diagnose metrics files, debug logs and event logs",
        description="Read PyTorch/XLA or xladev metrics reports and debug logs, and say what is wrong "
                    "(recompilation, host transfers, CPU fallbacks, slow compiles) with evidence and a fix.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="metrics file, report or debug log")
    parser.add_argument("-f", "--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--fail-on", choices=("warning", "error"),
                        help="exit with status 1 when a finding is at least this severe; 'warning' also fails "
                             "an unknown verdict (health not shown)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true", help="compare two runs: INPUT A and INPUT B")
    mode.add_argument("--single-run", action="store_true", help="read all inputs as one run, never compare")
    parser.add_argument("--width", type=_width, default=None,
                        help="text width for --format text (default: the terminal's, at most 100)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour in --format text (default: auto)")
    parser.set_defaults(command="report")
    return parser


def _is_comparison(args, sources_by_input: list[list]) -> bool:
    if args.compare:
        return True
    if args.single_run or len(sources_by_input) != 2:
        return False
    first, second = sources_by_input
    if len(first) != 1 or len(second) != 1:
        return False
    a, b = first[0], second[0]
    if a.run_id and b.run_id and a.run_id != b.run_id and a.rank == b.rank:
        return True  # two runs xladev tells apart: compared, not merged
    if not (a.has_metrics and b.has_metrics) or a.has_debug or b.has_debug:
        return False
    return a.final.counters != b.final.counters  # the same run printed twice has the same last counters


def _render(args, document) -> str:
    """The Document in the format asked for: every format is a renderer of the same Document."""
    from xladev.report import jsonout, markup, terminal

    if args.format == "text":
        to_terminal = args.output is None and sys.stdout.isatty()
        color = args.color == "always" or (args.color == "auto" and to_terminal and "NO_COLOR" not in os.environ)
        width = args.width
        if width is None:
            width = min(100, os.get_terminal_size().columns) if to_terminal else 80
        return terminal.render_terminal(document, width=width, color=color)
    renderers = {"json": jsonout.render_json, "markdown": markup.render_markdown, "html": markup.render_html}
    return renderers[args.format](document)


def _build(args):
    """Reads the inputs and returns (what to render, the run whose findings decide the exit status).

    Raises:
      NoCompleteRecordError: no input holds a complete record; its ``report`` is the one to render.
    """
    from xladev.report import compare, document
    from xladev.report.inputs import expand_rank_paths, read_source
    from xladev.report.loader import report_from_sources
    from xladev.report.model import NoCompleteRecordError, UnreadableInputError

    if args.compare and len(args.inputs) != 2:
        raise UsageError("--compare needs exactly two inputs (A and B)")
    sources_by_input = [[read_source(path) for path in expand_rank_paths(argument)] for argument in args.inputs]
    if _is_comparison(args, sources_by_input):
        try:
            runs = [report_from_sources(sources) for sources in sources_by_input]
        except NoCompleteRecordError as error:  # one side alone is no comparison: an error, not its report
            raise UnreadableInputError(str(error)) from None
        comparison = compare.compare(*runs)
        return compare.comparison_document(comparison), runs[1]
    report = report_from_sources([source for sources in sources_by_input for source in sources])
    return document.report_document(report), report


def _fails(report, level: str | None) -> bool:
    from xladev.analysis import UNKNOWN, WARNING, severity_rank

    if level is None:
        return False
    if level == WARNING and report.verdict() == UNKNOWN:
        return True  # the gate asks for a healthy run, and the input cannot show one
    return any(finding.rule != "healthy" and severity_rank(finding.severity) >= severity_rank(level)
               for finding in report.findings)


def run(args: argparse.Namespace) -> int:
    """Runs ``xladev report``.

    Args:
      args: the parsed arguments.

    Returns:
      0, 1 when ``--fail-on`` is met, 2 for a missing input, no complete record in any input (the
      report with the verdict ``unknown`` is still written) or unwritable output.
    """
    from xladev.report.document import report_document
    from xladev.report.model import NoCompleteRecordError, UnreadableInputError

    unreadable = None
    try:
        try:
            document, decisive = _build(args)
        except NoCompleteRecordError as error:
            # Written all the same: a CI job that keeps the JSON or HTML gets "unknown" and the reason.
            unreadable, decisive = error, error.report
            document = report_document(decisive)
        text = _render(args, document)
    except UnreadableInputError as error:
        print(f"xladev report: error: {error}", file=sys.stderr)
        return 2
    except UsageError as error:
        print(f"xladev report: error: {error}", file=sys.stderr)
        return 2
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    except OSError as error:
        print(f"xladev report: error: cannot write {args.output or 'output'}: {error.strerror or error}",
              file=sys.stderr)
        return 2
    if unreadable is not None:
        print(f"xladev report: error: {unreadable}", file=sys.stderr)
        return 2
    return 1 if _fails(decisive, args.fail_on) else 0
