"""torch.compile (the `xladev` backend): graph breaks and TorchDynamo recompilations, their wording and findings."""

from __future__ import annotations

import re
from collections.abc import Sequence

from xladev.analysis.finding_model import INFO, WARNING, Finding, _plural

GRAPH_BREAK = "torch.compile graph break"
DYNAMO_RECOMPILE = "torch.compile recompiled"

# How a TorchDynamo guard failure reads, by kind of change: a keyword of its text -> the fix.
_GUARD_ADVICE = (
    ("size mismatch", "an input's size changed: pad inputs to a few fixed sizes (bucketing), or mark the dimension "
                      "dynamic with torch._dynamo.mark_dynamic(tensor, dim) (xladev then compiles one program per size)"),
    ("stride mismatch", "an input's memory layout changed: make it contiguous before the call"),
    ("dtype mismatch", "an input's dtype changed: cast inputs to one dtype before the call"),
    ("device mismatch", "an input moved to another device: keep the inputs on the model's device"),
    ("requires_grad", "an input's requires_grad changed between calls: keep it the same"),
    ("==", "a Python value the code branches on or passes changed: make it a tensor, or keep it constant"),
    ("!=", "a Python value the code branches on or passes changed: make it a tensor, or keep it constant"),
)


# Graph breaks with a known remedy: a keyword of TorchDynamo's reason -> what to do.
_BREAK_ADVICE = (
    ("RNN, GRU, or LSTM", "TorchDynamo skips nn.LSTM/GRU/RNN by default: set torch._dynamo.config.allow_rnn = True "
                          "before the first call to compile them"),
    ("logging.Logger", "a logging call (often in a library's warning) cannot be traced: the graph splits there on "
                       "every call, into more programs with Python between them; avoid the call (transformers' "
                       "`loss_type=None` warning: set model.loss_type, such as \"ForCausalLM\", before compiling), "
                       "or let TorchDynamo skip it in compiled code: "
                       "torch._dynamo.config.ignore_logging_functions.add(logging.Logger.warning_once) (transformers' "
                       "warnings; logging.Logger.warning for plain ones)"),
    ("print", "print() cannot be traced: log from a step closure (xm.add_step_closure) or outside the function"),
    ("Tensor.item", "a value read (.item(), bool(tensor)) cannot be traced: keep the value on the device, or set "
                    "torch._dynamo.config.capture_scalar_outputs = True"),
    ("needs the host", "the op runs on the CPU (`xladev coverage` says why): the graph runs op by op"),
    ("cpu tensor", "a CPU tensor input keeps the graph lazy (a program would freeze its value): move it to the "
                   "device; for Adam, AdamW and the like, build the optimizer with capturable=True"),
)


def break_advice(reason: str) -> str | None:
    """What to do about a graph break with this reason, when xladev knows; else None."""
    return next((advice for key, advice in _BREAK_ADVICE if key in reason), None)


def graph_break_message(*, site: str, reason: str, by: str) -> str:
    """The analysis line for a graph break.

    Args:
      site: the user's `file:line`.
      reason: TorchDynamo's reason, or the op xladev could not put in a program and why.
      by: `dynamo` or `xladev` (see `GraphBreak`).

    Returns:
      One line.
    """
    where = "the graph runs lazily" if by == "xladev" else "the code there runs outside the compiled graphs"
    return f"{GRAPH_BREAK} at {site} ({where}): {reason}"


_BREAK_RE = re.compile(re.escape(GRAPH_BREAK) + r" at (.*?) \((the graph runs lazily|the code there runs outside the "
                       r"compiled graphs)\): (.*)$")


def parse_graph_break_message(message: str) -> tuple[str, str, str] | None:
    """(site, by, reason) of a `graph_break_message`, or None for another line."""
    match = _BREAK_RE.match(message)
    if match is None:
        return None
    return match.group(1), "xladev" if match.group(2).startswith("the graph") else "dynamo", match.group(3)


def dynamo_recompile_message(*, function: str, site: str, guard: str, compiles: int) -> str:
    """The analysis line for a TorchDynamo recompilation: which function, which guard, what to do."""
    return (f"{DYNAMO_RECOMPILE} {function} (compile {compiles}) called at {site}: guard failed: {guard}; "
            f"{guard_advice(guard)}")


_RECOMPILE_RE = re.compile(re.escape(DYNAMO_RECOMPILE) + r" (\S+) \(compile (\d+)\) called at (.*?): guard failed: "
                           r"(.*?); ")


def parse_dynamo_recompile_message(message: str) -> tuple[str, int, str, str] | None:
    """(function, compiles, site, guard) of a `dynamo_recompile_message`, or None for another line."""
    match = _RECOMPILE_RE.match(message)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), match.group(3), match.group(4)


def guard_advice(guard: str) -> str:
    """What to do about a failed guard, by what it checks."""
    return next((advice for key, advice in _GUARD_ADVICE if key in guard),
                "a guarded property of an input or global changed: keep it the same from call to call")


def graph_break_finding(*, breaks: Sequence[tuple[str, str, str, int]], steps: int) -> Finding | None:
    """torch.compile graph breaks, one evidence line per site.

    Args:
      breaks: (site, by, reason, times) per distinct break, most frequent first.
      steps: steps of the run (0 when unknown).

    Returns:
      A warning naming each site and reason, or None without breaks.
    """
    if not breaks:
        return None
    places = len(breaks)
    lazy = [b for b in breaks if b[1] == "xladev"]
    evidence = [f"{site}: {reason} ({_plural(times, 'time')})" for site, _, reason, times in breaks[:10]]
    known = []
    for _, _, reason, _ in breaks:
        advice = break_advice(reason)
        if advice and advice not in known:
            known.append(advice)
    if places > 10:
        evidence.append(f"... and {places - 10} more places")
    fix = ("Rewrite the code at each site so TorchDynamo can trace it (no print, .item(), data-dependent Python "
           "control flow or unsupported calls inside the compiled function; log with xm.add_step_closure), or move "
           "it out of the compiled function. Check with torch._dynamo.explain(fn)(*args).")
    if lazy:
        fix += (" For a graph that runs lazily, the op needs the host (a CPU fallback or a value read): "
                "`xladev coverage` says which ops run on the device.")
    if known:
        fix += " " + " ".join(a[0].upper() + a[1:] + "." for a in known)
    return Finding("graph-breaks", WARNING, f"torch.compile breaks the graph at {_plural(places, 'place')}",
                   "Each break ends a compiled graph: the code around it runs op by op, recorded lazily, and the "
                   "graphs on either side are compiled and run separately.", fix, evidence,
                   {"places": places, "breaks": sum(b[3] for b in breaks)}, subject=breaks[0][0])


def dynamo_recompile_finding(*, recompiles: Sequence[tuple[str, str, int]], steps: int) -> Finding | None:
    """TorchDynamo recompilations of compiled functions, by the guard that failed.

    Args:
      recompiles: (function, guard, times) per distinct failure, most frequent first.
      steps: steps of the run (0 when unknown).

    Returns:
      A warning (or a note for a single recompile), or None without recompilations.
    """
    if not recompiles:
        return None
    total = sum(times for _, _, times in recompiles)
    evidence = [f"{function}: guard failed {_plural(times, 'time')}: {guard}" for function, guard, times in recompiles[:10]]
    severity = WARNING if total > 1 else INFO
    return Finding("dynamo-recompiles", severity, f"torch.compile recompiled {_plural(total, 'time')}",
                   "Each recompilation traces the function again and compiles new XLA programs.",
                   guard_advice(recompiles[0][1]).capitalize() + ".", evidence, {"recompiles": total},
                   subject=recompiles[0][0])
