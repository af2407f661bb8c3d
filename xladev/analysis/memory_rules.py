"""Out of device memory: reading XLA's out-of-memory messages and the finding that explains them.

XLA says a device ran out of memory in a few wordings, all under the status RESOURCE_EXHAUSTED, which PyTorch/XLA
passes on (``RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: ...``) and logs again line by line:

- a GPU (PJRT's allocator): ``Out of memory while trying to allocate 58982400 bytes.``;
- a TPU at run time: ``Attempting to allocate 6.48G. That was not possible. There are 6.78G free, ...`` (or
  ``to reserve ... at the bottom of memory``);
- a TPU at compile time: ``Ran out of memory in memory space hbm. Used 29.80G of 7.98G hbm. Exceeded hbm capacity
  by 21.82G.``;
- xladev's device memory budget (XLADEV_DEVICE_MEMORY_LIMIT): ``RESOURCE_EXHAUSTED: graph H needs 72.39MB of device
  memory, over the device memory limit of 64.00MB ...``, followed by its explainer's lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from xladev.analysis.finding_model import ERROR, WARNING, Finding

OUT_OF_MEMORY = "out-of-memory"
MARKERS = ("RESOURCE_EXHAUSTED", "Resource exhausted", "Out of memory while trying to allocate",
           "That was not possible", "Ran out of memory in memory space")

_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes|[KMGT]i?B?|B)"
_NEED_RES = (
    re.compile(r"Out of memory while trying to allocate " + _SIZE, re.IGNORECASE),
    re.compile(r"Attempting to (?:allocate|reserve) " + _SIZE),
    re.compile(r"\bneeds " + _SIZE + r" of device memory"),
    re.compile(r"\bUsed " + _SIZE + r" of"),
)
_LIMIT_RES = (
    re.compile(r"device memory limit of " + _SIZE),
    re.compile(r"\bUsed \S+ of " + _SIZE),
)
_FREE_RE = re.compile(r"There are " + _SIZE + r" free")
_START_RE = re.compile(r"RESOURCE_EXHAUSTED|Resource exhausted|Out of memory while|Attempting to|Ran out of memory")
_BATCH_RE = re.compile(r"try a batch of (\d+)")


def _bytes(number: str, unit: str) -> int:
    prefix = unit[:1].upper()
    return int(float(number) * 1024 ** ("KMGT".index(prefix) + 1 if prefix in "KMGT" else 0))


def _first(patterns, text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return _bytes(*match.groups())
    return None


def parse_out_of_memory(text: str) -> dict | None:
    """Reads one line of XLA's (or xladev's budget's) out-of-memory message.

    Args:
      text: a line of output.

    Returns:
      None when the line says nothing of running out of memory; else ``message`` (the line from its status or
      first out-of-memory words on, without the log's prefix), and the sizes it names, in bytes, where it names
      them: ``need`` (what was asked for or used), ``limit`` (the capacity) and ``free``.
    """
    if not any(marker in text for marker in MARKERS):
        return None
    start = _START_RE.search(text)
    message = text[start.start():].strip() if start else text.strip()
    found: dict = {"message": message}
    for key, value in (("need", _first(_NEED_RES, message)), ("limit", _first(_LIMIT_RES, message)),
                       ("free", _first((_FREE_RE,), message))):
        if value is not None:
            found[key] = value
    return found


def add_out_of_memory(entries: list[dict], line: int, found: dict, known: Mapping, limit: int) -> dict | None:
    """Adds one sighting of an out-of-memory message to `entries` (one dict per distinct message).

    Args:
      entries: the messages so far; changed in place.
      line: where it was read.
      found: what `parse_out_of_memory` read of it.
      known: what the sighting knows of its graph (``hash``, ``site``, ``details``); empty values are left out.
      limit: the most distinct messages kept (PyTorch/XLA logs each one several times: those count again).

    Returns:
      Its entry (``count`` and first ``line`` added to `found`), or None past `limit`.
    """
    known = {key: value for key, value in known.items() if value}
    for entry in entries:
        if entry["message"] == found["message"]:
            entry["count"] += 1
            entry.update({key: value for key, value in known.items() if not entry.get(key)})
            return entry
    if len(entries) >= limit:
        return None
    entry = {**found, "count": 1, "line": line, **known}
    entries.append(entry)
    return entry


def out_of_memory_finding(events: Sequence[Mapping], format_bytes) -> Finding | None:
    """The device ran out of memory: always an error, with what each message says and the fix.

    Args:
      events: each distinct out-of-memory message: ``message``, ``count`` (times seen), optional ``need``,
        ``limit``, ``free`` (bytes), ``hash`` and ``site`` (the graph and user line, where known), ``hlo_path`` (its
        saved HLO) and ``details`` (the explainer's lines: biggest values with their lines, what else is live, the
        batch that fits).
      format_bytes: formats a byte count (`xladev.schema.units.format_bytes`).

    Returns:
      The finding, or None when there is no event.
    """
    if not events:
        return None
    first = events[0]
    sizes = []
    if first.get("need") is not None:
        sizes.append(f"needs {format_bytes(first['need'])}")
    if first.get("limit") is not None:
        sizes.append(f"limit {format_bytes(first['limit'])}")
    if first.get("free") is not None:
        sizes.append(f"{format_bytes(first['free'])} free")
    graph = f"graph {first['hash'][:16]}" if first.get("hash") else "a graph"
    title = f"The device ran out of memory: {graph}" + (f" ({', '.join(sizes)})" if sizes else "")
    if first.get("site"):
        title += f" at {first['site']}"
    evidence = []
    for event in events[:5]:
        count = event.get("count", 1)
        evidence.append(event["message"][:300] + (f" (seen {count} times)" if count > 1 else "")
                        + (f"; HLO: {event['hlo_path']}" if event.get("hlo_path") else ""))
        evidence.extend(line.strip() for line in event.get("details", ())[:12])
    batch = next((m.group(1) for e in events for line in e.get("details", ()) if (m := _BATCH_RE.search(line))), None)
    fix = ((f"Lower the batch to {batch} (the explainer's estimate from what scales with the batch), " if batch
            else "Lower the batch size (activations and their temporaries scale with it), ")
           + "free what stays live between steps (tensors kept in Python lists, e.g. losses: keep `loss.item()` "
             "read after the step instead), and sync more often so one graph does not hold several steps' "
             "activations. Run with XLADEV_DEVICE_MEMORY_LIMIT set to the device's memory to get the biggest "
             "buffers with their lines on any machine.")
    numbers: dict = {"events": len(events)}
    for key in ("need", "limit", "free"):
        if first.get(key) is not None:
            numbers[f"{key}_bytes"] = first[key]
    if batch:
        numbers["batch_that_fits"] = int(batch)
    return Finding(OUT_OF_MEMORY, ERROR, title,
                   "A graph needed more device memory than there was, so the step that ran it raised and computed "
                   "nothing. What it needs is its inputs, outputs and temporaries (XLA's memory analysis: the Post "
                   "Compilation Analysis) plus every other tensor still live on the device.",
                   fix, evidence=evidence, numbers=numbers, subject=first.get("hash", ""))


# Live device memory (or the process's host memory) that grows step over step (the runtime's checks,
# `runtime/api/memory_growth.py` and `host_memory_growth.py`): the words of their warnings and PT_XLA_DEBUG lines,
# which the report reads back.
MEMORY_GROWING = "Device memory keeps growing"
HOST_MEMORY_GROWING = "Host memory keeps growing"
# Host memory growth is told only from this rate on: the resident set moves by pages and allocator arenas, and a
# healthy run's own bookkeeping (a list of losses as Python numbers) grows by far less.
HOST_GROWTH_MIN_PER_STEP = 1 << 20
_LEADS = {"device": MEMORY_GROWING, "host": HOST_MEMORY_GROWING}
MEMORY_SPACES = tuple(_LEADS)  # the memories a growth warning (and a `memory_growing` record) can be about
_RULES = {"device": "memory-growing", "host": "host-memory-growing"}
_MEASURED = {"device": "live device memory", "host": "host memory (the process's resident set)"}
_NO_HOLDERS = {"device": "no tensor's buffers (the runtime's own state)",
               "host": "no CPU tensor (Python objects or native allocations)"}
_ADVICE = {
    "device": "Tensors that stay alive from step to step (a loss appended to a list, a metric summed on the device) "
              "keep their buffers for good: keep a Python number read after the step (loss.item()), or drop the "
              "reference.",
    "host": "CPU tensors or Python objects that stay alive from step to step (a `.cpu()` copy appended to a list) "
            "keep their memory for good: keep a Python number (loss.item()), or drop the reference.",
}
_GROWING_MEMORY_RE = re.compile(r"(" + "|".join(map(re.escape, _LEADS.values())) + r"): (\S+) "
                                r"at step (\d+) -> (\S+) at step (\d+) \(\+(\S+) per step\)\. What grew: (.*?)\. "
                                r"(?:Tensors|CPU tensors) ")
_HOLDER_RE = re.compile(r"(.+?) made at (.+) \+(\S+) per step in (\d+) buffer\(s\)$")


def memory_growing_message(*, from_step: int, from_bytes: int, to_step: int, to_bytes: int, per_step_bytes: float,
                           holders: Sequence[Mapping], format_bytes, space: str = "device") -> str:
    """The runtime's warning (and PT_XLA_DEBUG line) when live device memory, or host memory, grew at every step
    sampled.

    Args:
      from_step, from_bytes: the first step of the growth and what was live (device) or resident (host) at its end.
      to_step, to_bytes: the latest.
      per_step_bytes: the growth per step.
      holders: what grew, biggest first: ``kind``, ``line``, ``per_step_bytes``, ``buffers`` (new buffers).
      format_bytes: formats a byte count (`xladev.schema.units.format_bytes`).
      space: "device" (live device buffers) or "host" (the process's resident memory).

    Returns:
      One line.

    Raises:
      ValueError: another `space`.
    """
    if space not in _LEADS:
        raise ValueError(f"memory space must be 'device' or 'host', not {space!r}")
    grew = "; ".join(f"{h['kind']} made at {h['line']} +{format_bytes(h['per_step_bytes'])} per step in "
                     f"{h['buffers']} buffer(s)" for h in holders) or _NO_HOLDERS[space]
    return (f"{_LEADS[space]}: {format_bytes(from_bytes)} at step {from_step} -> {format_bytes(to_bytes)} at step "
            f"{to_step} (+{format_bytes(per_step_bytes)} per step). What grew: {grew}. {_ADVICE[space]}")


def parse_memory_growing(message: str, parse_bytes) -> dict | None:
    """The numbers of a `memory_growing_message`, or None for another line.

    Args:
      message: a line.
      parse_bytes: reads a formatted byte count (`xladev.schema.units.parse_bytes`).

    Returns:
      ``from_step``, ``from_bytes``, ``to_step``, ``to_bytes``, ``per_step_bytes``, ``holders`` (dicts as the
      message's) and ``space``, or None.
    """
    match = _GROWING_MEMORY_RE.search(message)
    if match is None:
        return None
    holders = []
    if match.group(7) not in _NO_HOLDERS.values():
        for part in match.group(7).split("; "):
            held = _HOLDER_RE.match(part)
            if held:
                holders.append({"kind": held.group(1), "line": held.group(2),
                                "per_step_bytes": parse_bytes(held.group(3)), "buffers": int(held.group(4))})
    return {"from_bytes": parse_bytes(match.group(2)), "from_step": int(match.group(3)),
            "to_bytes": parse_bytes(match.group(4)), "to_step": int(match.group(5)),
            "per_step_bytes": parse_bytes(match.group(6)), "holders": holders,
            "space": next(space for space, lead in _LEADS.items() if lead == match.group(1))}


def memory_growing_finding(*, from_step: int, from_bytes: float, to_step: int, to_bytes: float,
                           per_step_bytes: float, holders: Sequence[Mapping], format_bytes,
                           space: str = "device") -> Finding:
    """The report's finding for live device memory, or host memory, that grew at every sampled step (a leak, or
    data that grows).

    Args:
      as `memory_growing_message`'s.

    Returns:
      A warning naming the line whose tensors grew most.
    """
    top = holders[0] if holders else None
    where = f": {top['kind']} made at {top['line']}" if top else ""
    evidence = [f"{_MEASURED[space]} {format_bytes(from_bytes)} at step {from_step} -> {format_bytes(to_bytes)} at "
                f"step {to_step}, rising at every step sampled"]
    evidence += [f"{h['kind']} made at {h['line']}: +{format_bytes(h['per_step_bytes'])} per step in "
                 f"{h['buffers']} new buffer(s)" for h in holders[:5]]
    if not holders:
        evidence.append(f"what grew: {_NO_HOLDERS[space]}")
    if space == "host":
        detail = ("The process's resident memory rose at every step the runtime sampled, by at least "
                  f"{format_bytes(HOST_GROWTH_MIN_PER_STEP)} a step on average. A training loop that keeps its memory "
                  "stable after the first steps holds the same objects each step; this one holds more, and the "
                  "machine runs out of memory (or starts to swap) some steps later.")
    else:
        detail = ("Live device memory rose at every step the runtime sampled. A run that keeps its memory stable "
                  "after the first steps holds the same buffers each step; this one holds more, and at this rate "
                  "it runs out of memory some steps later.")
    return Finding(_RULES[space], WARNING, f"{_LEADS[space]}, +{format_bytes(per_step_bytes)} per step{where}", detail,
                   _host_fix(top) if space == "host" else _device_fix(top), evidence=evidence,
                   numbers={"per_step_bytes": per_step_bytes, "from_step": from_step, "to_step": to_step,
                            "to_bytes": to_bytes},
                   subject=top["line"] if top else "")


def _device_fix(top: Mapping | None) -> str:
    if top and top["kind"] in ("other", "batch"):
        fix = (f"The tensors made at {top['line']} stay alive from step to step: something keeps a reference "
               "(a list of losses, a running sum on the device). Keep a Python number instead (`loss.item()` "
               "after the step, or in a step closure), or drop the reference.")
    elif top:
        fix = (f"The {top['kind']} made at {top['line']} grows each step. If that is not meant (new parameters or "
               "optimizer state every step, an autograd graph kept across steps), keep one set and reuse it.")
    else:
        fix = "Call xladev.debug.memory_report() between steps to see what holds the memory."
    return fix + " `xladev.debug.memory_report()` lists every live buffer by kind and line."


def _host_fix(top: Mapping | None) -> str:
    if top:
        return (f"The CPU tensors made at {top['line']} stay alive from step to step: something keeps a reference "
                "(a list of `.cpu()` copies, a history of outputs). Keep a Python number instead (`loss.item()`), "
                "or drop the reference.")
    return ("No CPU tensor grew: the growth is Python objects or native memory kept from step to step (a list "
            "that only grows, a cache without a bound). `tracemalloc` snapshots two steps apart show the Python "
            "side by line.")
