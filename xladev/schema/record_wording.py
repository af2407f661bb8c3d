"""How records are put into words wherever they are shown: a profile's step window and the command that opens it,
the "Recompilation Cause" lines of PT_XLA_DEBUG output (and the pattern that reads their step back), a run's identity.

One home for each sentence, so the writer's text and the readers' parsing of it cannot drift apart.
"""

from __future__ import annotations

import re
import time


def step_window(first: int | None, last: int | None) -> str:
    """`steps 5–7`, `step 5`, or `steps ?`: a profile's step window as the report and the TUI write it."""
    if first is None or last is None:
        return "steps ?"
    return f"step {first}" if first == last else f"steps {first}–{last}"


def tensorboard_command(logdir: str) -> str:
    """The command that shows the profiles under `logdir` in TensorBoard's Profile tab."""
    import shlex

    return f"tensorboard --logdir {shlex.quote(logdir)}"


RECOMPILED_IN_STEP_RE = re.compile(r"^compared with graph \S+ from the same site, in step (\d+):$")


def recompilation_lines(site: str, previous_hash: str, changes, graphs_at_site, compile_ns_at_site,
                        step: int | None = None) -> list[str]:
    """The "Recompilation Cause" section of PT_XLA_DEBUG output: what changed, in which step (0-based, when
    given; `RECOMPILED_IN_STEP_RE` reads it back), and the site's totals."""
    from xladev.schema.units import format_time_ns

    total = format_time_ns(compile_ns_at_site) if isinstance(compile_ns_at_site, (int, float)) else "?"
    when = "" if step is None else f", in step {step}"
    return ([f"compared with graph {previous_hash} from the same site{when}:"]
            + [f"- {change}" for change in (changes or ["graph changed"])]
            + [f"{site or '?'} has compiled {graphs_at_site} graphs so far, {total} compile time in total"])


def run_identity(host: str | None, pid: int | None, started_unix: float | None) -> str:
    """A run's identity as every xladev output states it: ``host:pid:start`` (start in whole seconds)."""
    return f"{host or '?'}:{pid if pid is not None else '?'}:{int(started_unix or 0)}"


def run_label(host: str | None, pid: int | None, started_unix: float | None) -> str:
    """The identity for people: ``pid 1176 on vm, started 2026-11-23 06:29:32``."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_unix)) if started_unix else "?"
    return f"pid {pid} on {host or '?'}, started {started}"
