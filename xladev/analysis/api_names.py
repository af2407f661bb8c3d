"""Advice in the run's own API names: PyTorch/XLA's for its reports, xladev's for xladev's runs."""

from __future__ import annotations

from xladev.analysis.finding_model import Finding


# ---------------------------------------------------------------- which API a run used

XLADEV_API = "xladev"
TORCH_XLA_API = "torch_xla"
# xladev's PT_XLA_DEBUG end-of-run summary says which, on a line of its own.
API_PREFIX = "API: "
# PyTorch/XLA counts its import (registering the xla device) under this counter; xladev's torch_xla alias does
# the same, so a metrics report of a script run through the alias says so.
ALIAS_COUNTER = "RegisterXLAFunctions"


def api_line(api: str) -> str:
    """The summary's line: ``API: xladev``, or ``API: torch_xla (xladev's alias, xladev run)``."""
    return API_PREFIX + (f"{TORCH_XLA_API} (xladev's alias, xladev run)" if api == TORCH_XLA_API else XLADEV_API)


def parse_api_line(text: str) -> str | None:
    """The API of an `api_line` text, None for another line."""
    if not text.startswith(API_PREFIX):
        return None
    words = text[len(API_PREFIX):].split()
    return words[0] if words and words[0] in (XLADEV_API, TORCH_XLA_API) else None


# ---------------------------------------------------------------- advice in the run's own names

# The fixes above are written with both stacks' names where they differ. A run's own stack decides
# which one a finding shows: PyTorch/XLA's for its reports, xladev's for xladev's runs.
_NAMES_FOR = {
    "xladev": (("xladev.mark_step() (torch_xla.sync())", "xladev.mark_step()"),
               ("xladev.initialize_cache(dir) (torch_xla.runtime.initialize_cache(dir))",
                "xladev.initialize_cache(dir) or XLADEV_COMPILATION_CACHE=dir"),
               ("torch_xla.sync() (xm.mark_step())", "xladev.mark_step()"),
               ("torch_xla.sync()", "xladev.mark_step()"),
               ("xm.add_step_closure", "xladev.add_step_closure"),
               ("a DeviceLoader (MpDeviceLoader)", "an xladev.DeviceLoader"),
               ("the parallel loader", "xladev.DeviceLoader"),
               ("a parallel loader", "an xladev.DeviceLoader")),
    "torch_xla": (("xladev.mark_step() (torch_xla.sync())", "torch_xla.sync()"),
                  ("xladev.initialize_cache(dir) (torch_xla.runtime.initialize_cache(dir))",
                   "torch_xla.runtime.initialize_cache(dir)"),
                  ("torch_xla.sync() (xm.mark_step())", "torch_xla.sync() (xm.mark_step())"),
                  ("a DeviceLoader (MpDeviceLoader)", "pl.MpDeviceLoader"),
                  ("a DeviceLoader", "pl.MpDeviceLoader"),
                  ("xladev.mark_step()", "torch_xla.sync()")),
}


def in_names_of(finding: Finding, stack: str) -> Finding:
    """The finding with its fix and detail in `stack`'s API names (``xladev`` or ``torch_xla``)."""
    for old, new in _NAMES_FOR.get(stack, ()):
        finding.fix = finding.fix.replace(old, new)
        finding.detail = finding.detail.replace(old, new)
    return finding
