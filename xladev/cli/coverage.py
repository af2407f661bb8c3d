"""`xladev coverage`: which aten ops run through jax lowerings, which fall back to the CPU, which fail.

Each OpInfo of PyTorch's op_db (a representative subset by default) runs its samples on the CPU and
on `xla` in worker processes; outputs and input gradients are compared. The table lists each op's
forward and backward status; the totals count OpInfos per status and the distinct aten ops that ran
as lowerings in OpInfos whose forward parity passed.

Exit status: 0; 1 with ``--strict`` when an op fails; 2 for an unknown op name or an unwritable file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from xladev.analysis import fallback_reasons

EPILOG = """\
statuses: lowered (parity, no CPU fallback), fallback (parity, some aten op ran on the CPU),
failing (mismatch or error: the reason says which), skipped (random or uninitialised output,
no comparable sample).

examples:
  xladev coverage                       # the default subset (~230 OpInfos, about a minute)
  xladev coverage --ops add nn.functional.conv2d
  xladev coverage --full --json coverage.json   # the whole op_db (several minutes)
"""

_DETAIL_CHARS = 200
_STYLE = {"lowered": "green", "fallback": "yellow", "failing": "bold red", "skipped": "dim"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the ``coverage`` command.

    Args:
      subparsers: the object returned by ``ArgumentParser.add_subparsers``.

    Returns:
      The command's parser.
    """
    parser = subparsers.add_parser(
        "coverage", help="print the op coverage table (lowered, fallback, failing)",
        description="Compare ops on xla with eager CPU on PyTorch's OpInfo samples and say, per op, whether it "
                    "ran through jax lowerings, fell back to the CPU, or failed.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--ops", nargs="+", metavar="NAME",
                       help="OpInfo names (e.g. add, div.floor_rounding; a name without variant selects all variants)")
    which.add_argument("--full", action="store_true", help="sweep the whole op_db instead of the default subset")
    parser.add_argument("--json", metavar="FILE", help="also save the results as JSON")
    parser.add_argument("--workers", type=int, default=None,
                        help="parallel worker processes (default: 2, or 1 on a single core)")
    parser.add_argument("--samples", type=int, default=3, help="samples compared per op and direction (default: 3)")
    parser.add_argument("--no-backward", action="store_true", help="skip the gradient checks")
    parser.add_argument("--only", choices=("fallback", "failing", "problems"),
                        help="list only these ops in the table (problems: fallback, failing, skipped); totals stay whole")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when an op fails")
    parser.set_defaults(command="coverage")
    return parser


def _table(summary, only: str | None):
    from rich.table import Table

    table = Table(title="op coverage on OpInfo samples (xla vs eager CPU)", title_justify="left", expand=False)
    table.add_column("op (OpInfo)", overflow="fold", max_width=44)
    table.add_column("forward", no_wrap=True)
    table.add_column("backward", no_wrap=True)
    table.add_column("detail (fallback ops / failure)", overflow="fold", min_width=30, ratio=1)
    table.add_column("s", justify="right", no_wrap=True)
    wanted = {"fallback": {"fallback"}, "failing": {"failing"}, "problems": {"fallback", "failing", "skipped"}}.get(only)
    for r in summary.results:
        statuses = {r.forward.status, r.backward.status}
        if wanted is not None and not (statuses & wanted):
            continue
        detail = r.forward.reason if r.forward.status in ("failing", "fallback", "skipped") else ""
        if r.backward.status in ("failing", "fallback") and r.backward.reason not in detail:
            detail = (detail + "; " if detail else "") + "backward: " + r.backward.reason
        if len(detail) > _DETAIL_CHARS:
            detail = detail[:_DETAIL_CHARS - 1] + "…"  # the whole reason is in --json
        table.add_row(r.name, _cell(r.forward.status), _cell(r.backward.status), detail, f"{r.seconds:.1f}")
    return table


def _cell(status):
    if status is None:
        return "[dim]-[/dim]"
    return f"[{_STYLE[status]}]{status}[/{_STYLE[status]}]"


def _totals(summary, seconds: float):
    from rich.table import Table

    totals = summary.totals()
    table = Table(title="totals", title_justify="left")
    table.add_column("")
    for status in ("lowered", "fallback", "failing", "skipped"):
        table.add_column(status, justify="right", style=_STYLE[status])
    for direction in ("forward", "backward"):
        table.add_row(f"OpInfos, {direction}", *(str(totals[direction][s]) for s in ("lowered", "fallback", "failing",
                                                                                      "skipped")))
    forward = totals["forward"]
    share = 100.0 * forward["lowered"] / max(totals["ops"], 1)
    lines = [
        f"{totals['ops']} OpInfos in {seconds:.0f}s: {forward['lowered']} lowered ({share:.1f}%), "
        f"{forward['fallback']} falling back, {forward['failing']} failing, {forward['skipped']} skipped (forward)",
        f"distinct aten ops lowered with forward parity: {totals['lowered_aten_ops']}",
    ]
    fallbacks = summary.fallback_aten_ops()
    if fallbacks:
        lines.append(f"aten ops that ran on the CPU ({len(fallbacks)}), by reason (docs/ops.md):")
        by_reason: dict[str, list[str]] = {}
        for op in fallbacks:
            by_reason.setdefault(fallback_reasons.reason(op), []).append(op)
        for reason, ops in sorted(by_reason.items()):
            lines.append(f"  {reason} ({len(ops)}): {', '.join(ops)}")
    return table, lines


def run(args: argparse.Namespace) -> int:
    """Runs ``xladev coverage``.

    Args:
      args: the parsed arguments.

    Returns:
      0; 1 with ``--strict`` when an op fails; 2 for an unknown op or an unwritable JSON file.
    """
    from rich.console import Console

    from xladev import coverage

    err = Console(stderr=True)
    try:
        ops = coverage.select_ops(args.ops, full=args.full)
    except KeyError as exc:
        print(f"xladev coverage: error: {exc.args[0]}", file=sys.stderr)
        return 2
    workers = args.workers or max(1, min(2, os.cpu_count() or 1))
    options = {"max_samples": args.samples, "max_backward_samples": max(1, min(args.samples, 2)),
               "backward": not args.no_backward}
    start = time.perf_counter()
    with err.status(f"checking {len(ops)} OpInfos on {workers} worker(s)...") as status:
        done = [0]

        def progress(result):
            done[0] += 1
            status.update(f"checked {done[0]}/{len(ops)} OpInfos: {result.name} {result.forward.status}")

        summary = coverage.sweep(ops, workers=workers, progress=progress, **options)
    seconds = time.perf_counter() - start
    out = Console()
    out.print(_table(summary, args.only))
    totals_table, lines = _totals(summary, seconds)
    out.print(totals_table)
    for line in lines:
        out.print(line, highlight=False)
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(dict(summary.to_json(), seconds=round(seconds, 1)), handle, indent=1)
        except OSError as exc:
            print(f"xladev coverage: error: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 1 if args.strict and summary.count("failing") + summary.count("failing", "backward") else 0
