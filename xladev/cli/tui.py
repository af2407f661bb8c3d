"""`xladev tui`: watch a run live, or replay its event log.

    xladev tui -- python train.py --steps 100     # runs it, with the event log on
    xladev tui run.events.jsonl                   # follows a running job, or replays a finished one

Exit status: the child's exit code when the UI ran one (0 if it was stopped from the UI), else 0;
2 when the file is not an event log or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

from xladev.errors import UsageError

EPILOG = """\
keys: 1-4 switch views (overview, counters, graphs, log) from any view, / filter counters, s sort
them, p pause the display, Enter on a graph opens its IR, Enter on a finding or an alert opens its
graph, q quit (asks first when it would stop a job the UI started).

The overview leads with the findings of `xladev report` (the same rules, on the log so far) and
where the time went; a line says which graph is compiling and for how long. The output of a job the
UI started is kept beside its event log (<log>.stdout) and shown again in a replay.

examples:
  xladev tui -- python train.py --steps 50
  xladev tui --log run.events.jsonl -- python train.py
  XLADEV_EVENT_LOG=run.events.jsonl python train.py &  xladev tui run.events.jsonl
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the ``tui`` command."""
    parser = subparsers.add_parser(
        "tui", help="live terminal UI of a run (or a replay of its event log)",
        description="Show steps, compiles, recompilation alerts, transfer hot spots, fallbacks and graphs live.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", metavar="PATH", help="with a command: where the child writes its event log "
                                                      "(default: a temporary file, kept after the run)")
    parser.add_argument("--refresh", type=float, default=0.1, metavar="SECONDS",
                        help="redraw at most this often (default 0.1)")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="LOG | -- COMMAND ...",
                        help="an event log to follow, or -- and the command to run")
    parser.set_defaults(command="tui")
    return parser


def make_source(args: argparse.Namespace):
    """The source for the parsed arguments.

    Raises:
      SystemExit(2) via UsageError: nothing to show, or a file that is not an event log.
    """
    from xladev.schema.records import NotAnEventLog
    from xladev.schema.log_header import read_header
    from xladev_tui.sources import ChildProcessSource, FileTailSource

    target = list(args.target)
    dashed = bool(target) and target[0] == "--"
    if dashed:
        target = target[1:]
    if not target:
        raise UsageError("give an event log to follow, or -- and the command to run")
    if dashed or len(target) > 1:
        from xladev.attach.job_environment import child_environment

        # A job on a real torch_xla gets the adapter, which writes the same event log (xladev.attach).
        return ChildProcessSource(target, log_path=args.log, env=child_environment(os.environ))
    path = target[0]
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not an event log")
    if os.path.exists(path):
        try:
            read_header(path)
        except NotAnEventLog as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return FileTailSource(path)


def run(args: argparse.Namespace) -> int:
    """Runs ``xladev tui``."""
    try:
        source = make_source(args)
    except UsageError as exc:
        print(f"xladev tui: error: {exc}", file=sys.stderr)
        return 2
    from xladev_tui.app import XladevTUI

    app = XladevTUI(source, refresh_interval=args.refresh)
    code = app.run()
    log_path = getattr(source, "log_path", None)
    if log_path and os.path.exists(log_path):
        from xladev_tui.job_output import output_path

        kept = output_path(log_path)
        output = f"; the job's output at {kept}" if os.path.exists(kept) else ""
        print(f"xladev tui: the event log is kept at {log_path} (xladev report {log_path}){output}", file=sys.stderr)
    if source.owns_child:
        exit_code = getattr(source, "exit_code", None)
        return exit_code if isinstance(exit_code, int) and exit_code >= 0 else 0
    return 0 if code is None else int(code) if isinstance(code, int) and code >= 0 else 0
