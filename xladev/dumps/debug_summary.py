"""xladev's end-of-run summary in a PT_XLA_DEBUG log (``xladev summary: `` lines, written by
sinks/pt_xla_debug/sink.py `summary_text` at PT_XLA_DEBUG_LEVEL >= 1): totals, time, identity, then sections."""

from __future__ import annotations

import re

from xladev import analysis
from xladev.analysis import wall_time
from xladev.schema.record_wording import SUMMARY_ENDED

RUN = "Run: "  # host:pid:start, `xladev.schema.record_wording.run_identity`
_TOTALS_RE = re.compile(r"^(\d+) steps, (\d+) compiles, (\d+) device->host transfers$")
_SPOT_RE = re.compile(r"^(.+?) at (.+): (\d+) transfers, \S+, ([\d.]+) per step$")
_FALLBACK_RE = re.compile(r"^(\S+) at (.+): (\d+) call\(s\)")


class SummaryReader:
    """Reads the summary's lines into `summary`.

    Attributes:
      summary: None until a totals line; then ``steps``, ``compiles``, ``transfers``, ``line``, ``hot_spots``
        (dicts: kind, site, count, per_step, line), ``fallbacks`` (dicts: op, site, count, line), and when
        present ``time``, ``steady_transfers``, ``run``, ``api`` and ``ended`` (how a signal ended the run).
    """

    def __init__(self) -> None:
        self.summary: dict | None = None
        self._section = ""

    def feed(self, lineno: int, body: str) -> None:
        """One line of the summary (the text after its prefix): totals, then sections of indented entries.

        Args:
          lineno: the line's number in the input.
          body: the line after ``xladev summary: ``, without its line end.
        """
        totals = _TOTALS_RE.match(body)
        if totals:  # a new summary (a second run in the same file replaces the first)
            self.summary = {"steps": int(totals.group(1)), "compiles": int(totals.group(2)),
                            "transfers": int(totals.group(3)), "line": lineno, "hot_spots": [], "fallbacks": []}
            self._section = ""
            return
        summary = self.summary
        if summary is None:
            return
        breakdown = wall_time.parse_summary_line(body, summary["steps"])
        if breakdown is not None:
            summary["time"] = breakdown
            return
        steady = analysis.parse_steady_transfers_line(body)
        if steady is not None:
            summary["steady_transfers"] = steady
            return
        for key, prefix in (("run", RUN), ("ended", SUMMARY_ENDED)):
            if body.startswith(prefix):
                summary[key] = body[len(prefix):].strip()
                return
        api = analysis.parse_api_line(body)
        if api is not None:
            summary["api"] = api
            return
        if not body.startswith("  "):
            self._section = body.rstrip(":")
            return
        self._entry(lineno, body.strip())

    def _entry(self, lineno: int, entry: str) -> None:
        if self._section.startswith("Transfer hot spots"):
            spot = _SPOT_RE.match(entry)
            if spot:
                self.summary["hot_spots"].append({"kind": spot.group(1), "site": spot.group(2),
                                                  "count": int(spot.group(3)), "per_step": float(spot.group(4)),
                                                  "line": lineno})
        elif self._section.startswith("CPU fallback ops"):
            fallback = _FALLBACK_RE.match(entry)
            if fallback:
                self.summary["fallbacks"].append({"op": fallback.group(1), "site": fallback.group(2),
                                                  "count": int(fallback.group(3)), "line": lineno})
