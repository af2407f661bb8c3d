"""How records are put into words wherever they are shown: a profile's step window and the command that opens it,
the "Recompilation Cause" lines of PT_XLA_DEBUG output (and their reader), a run's identity.

One home for each sentence, so the writer's text and the readers' parsing of it cannot drift apart.
"""

from __future__ import annotations

import re
import time

from xladev.schema.units import format_bytes


def step_window(first: int | None, last: int | None) -> str:
    """`steps 5–7`, `step 5`, or `steps ?`: a profile's step window as the report and the TUI write it."""
    if first is None or last is None:
        return "steps ?"
    return f"step {first}" if first == last else f"steps {first}–{last}"


def tensorboard_command(logdir: str) -> str:
    """The command that shows the profiles under `logdir` in TensorBoard's Profile tab."""
    import shlex

    return f"tensorboard --logdir {shlex.quote(logdir)}"


# What a recompilation says changed when the comparison named nothing (the graphs' texts were not kept).
NO_CHANGE_SAID = "graph changed"


def change_headline(changes) -> str:
    """What a recompilation changed, in one line: its first (most telling) change, or `NO_CHANGE_SAID`."""
    return changes[0] if changes else NO_CHANGE_SAID


_COMPARED_RE = re.compile(r"^compared with graph (\S+) from the same site(?:, in step (\d+))?:$")
_SITE_TOTAL_RE = re.compile(r"^.* has compiled (\d+|\?) graphs so far, (\S+) compile time in total$")


def recompilation_lines(site: str, previous_hash: str, changes, graphs_at_site, compile_ns_at_site,
                        step: int | None = None) -> list[str]:
    """The "Recompilation Cause" section of PT_XLA_DEBUG output: what changed, in which step (0-based, when
    given), and the site's totals. `recompile_of_lines` reads it back."""
    from xladev.schema.units import format_time_ns

    total = format_time_ns(compile_ns_at_site) if isinstance(compile_ns_at_site, (int, float)) else "?"
    when = "" if step is None else f", in step {step}"
    return ([f"compared with graph {previous_hash} from the same site{when}:"]
            + [f"- {change}" for change in (changes or [NO_CHANGE_SAID])]
            + [f"{site or '?'} has compiled {graphs_at_site} graphs so far, {total} compile time in total"])


def recompile_of_lines(lines: list[str]) -> tuple[dict, int | None]:
    """Reads a "Recompilation Cause" section (`recompilation_lines`) back into a compile record's `recompile`.

    Args:
      lines: the section's lines, stripped.

    Returns:
      ``({"previous", "changes"[, "graphs_at_site", "compile_ns_at_site"]}, step)``: a total printed as ``?`` is
      left out, and the step is None when the section names none.
    """
    from xladev.schema.units import UnitParseError, parse_time

    recompile: dict = {"previous": "?", "changes": []}
    step = None
    for line in lines:
        if (compared := _COMPARED_RE.match(line)) is not None:
            recompile["previous"] = compared.group(1)
            step = int(compared.group(2)) if compared.group(2) is not None else None
        elif line.startswith("- "):
            recompile["changes"].append(line[2:])
        elif (total := _SITE_TOTAL_RE.match(line)) is not None:
            if total.group(1) != "?":
                recompile["graphs_at_site"] = int(total.group(1))
            try:
                recompile["compile_ns_at_site"] = int(parse_time(total.group(2)))
            except UnitParseError:
                pass  # printed as "?": the writer did not know it
    return recompile, step


def run_identity(host: str | None, pid: int | None, started_unix: float | None) -> str:
    """A run's identity as every xladev output states it: ``host:pid:start`` (start in whole seconds)."""
    return f"{host or '?'}:{pid if pid is not None else '?'}:{int(started_unix or 0)}"


# The PT_XLA_DEBUG summary's line saying how a signal ended the run (``Ended: terminated by SIGTERM``, the end
# record's `describe()`); absent when the run ended on its own.
SUMMARY_ENDED = "Ended: "


def run_label(host: str | None, pid: int | None, started_unix: float | None) -> str:
    """The identity for people: ``pid 1176 on vm, started 2026-11-23 06:29:32``."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started_unix)) if started_unix else "?"
    return f"pid {pid} on {host or '?'}, started {started}"


# Inputs and outputs a sharding layout lists each; the rest are counted (a model has hundreds of parameters).
SHARDING_LINES = 12


def layout_lines(shardings: dict, limit: int = SHARDING_LINES) -> list[str]:
    """A compile record's `shardings` in words, as the PT_XLA_DEBUG analysis's `Sharding:` section and the TUI's
    graph view show it: each input and output with its shape, sharding and bytes on one device (split ones first),
    then what one device holds of them in all.

    Args:
      shardings: ``{"inputs": [...], "outputs": [...]}``, entries ``{"shape", "sharding", "device_bytes"}``.
      limit: entries listed per side; the rest are counted.

    Returns:
      The lines.
    """
    lines = []
    totals = {}
    for side in ("inputs", "outputs"):
        entries = [e for e in shardings.get(side) or [] if isinstance(e, dict)]
        totals[side] = sum(e.get("device_bytes") or 0 for e in entries)
        # Split ones first (those a user marked, or XLA's partitioner chose), each in its place's order.
        ordered = sorted(enumerate(entries), key=lambda e: (e[1].get("sharding") == "{replicated}", e[0]))
        for index, entry in ordered[:limit]:
            lines.append(f"{side[:-1]} {index}: {entry.get('shape', '?')} {entry.get('sharding', '?')}, "
                         f"{format_bytes(entry.get('device_bytes') or 0)} per device")
        if len(entries) > limit:
            lines.append(f"... and {len(entries) - limit} more {side}")
    lines.append(f"per device: inputs {format_bytes(totals['inputs'])}, outputs {format_bytes(totals['outputs'])}")
    return lines
