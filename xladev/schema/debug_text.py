"""PyTorch/XLA's PT_XLA_DEBUG analysis blocks (FORMATS.md §3), line for line: written and read here.

    Compilation Analysis: ================================================================================
    Compilation Analysis: Compilation Cause
    Compilation Analysis:   most likely user code trying to access tensor value before torch_xla.sync
    Compilation Analysis:   xladev: user code trying to access tensor value before torch_xla.sync: .item()
    Compilation Analysis: Graph Info:
    Compilation Analysis:   Graph Hash: c74c3b91b855b2b123f833b0d5f86943
    Compilation Analysis:   Number of Graph Inputs: 2
    Compilation Analysis:   Number of Graph Outputs: 1
    Compilation Analysis: Python Frame Triggered Execution:
    Compilation Analysis: > train_step (/home/me/train.py:48)
    Compilation Analysis:   <module> (/home/me/train.py:60)
    Compilation Analysis: --------------------------------------------------------------------------------
    Compilation Analysis: ================================================================================

An Execution Analysis block is the same with ``Execution`` in its prefix and title. After PyTorch/XLA's cause line
xladev adds its exact cause (``xladev: ...``) where it knows more, sections of its own (``Recompilation Cause``:
what changed since the site's previous graph), and marks the user's frame with ``>``. A compile's
``Post Compilation Analysis`` block follows it: XLA's memory analysis in GB.

The writer (`analysis_block_text`, `post_compilation_block`) is the PT_XLA_DEBUG sink's
(`xladev.sinks.pt_xla_debug.blocks` turns an event's cause into its lines); the reader (`AnalysisBlockReader`) is the
debug-log reader's (`xladev.dumps.debug_analysis.DebugLog`), which the report and the torch_xla adapter read with.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from xladev.schema.memory import SIZES
from xladev.schema.sites import first_user_index, shown_frames

RULE_EQ = "=" * 80
RULE_DASH = "-" * 80
DOTS = "." * 10
# Starts xladev's line after PyTorch/XLA's cause line: the exact cause, which a reader takes instead of the guess.
XLADEV_CAUSE_PREFIX = "xladev: "

ANALYSIS_RE = re.compile(r"(Post Compilation|Compilation|Execution) Analysis: ?(.*?)\s*$")
FRAME_RE = re.compile(r"^\s*(.*?) \((.*):(\d+)\)\s*$")  # a frame line, ``fn (file:line)``
_POST_SIZE_RE = re.compile("(" + "|".join(size.printed for size in SIZES.values()) + r"): ([\d.eE+-]+|nan) GB")
# A Post Compilation Analysis line's words -> the column its size is kept under.
POST_COMPILE_FIELDS = {size.printed: size.column for size in SIZES.values()}
_CAUSE_TITLES = ("Compilation Cause", "Execution Cause")


# ---------------------------------------------------------------- writing


def frame_lines(frames, max_frames: int) -> list[str]:
    """Frame lines, innermost first; the first user frame is marked with `>`.

    Past `max_frames` the list is cut (PyTorch/XLA's dots); a user frame beyond the cut is still printed after
    the dots, so the user's line survives a deep stack (torch.compile's wrappers, autograd's) as the one fact
    the block is for.

    Args:
      frames: the Python stack, innermost first: anything with `name`, `file` and `line` (`xladev.schema.sites`).
      max_frames: PT_XLA_DEBUG_MAX_FRAME.

    Returns:
      The lines, without the block's prefix.
    """
    shown = shown_frames(frames)
    user = first_user_index(shown)
    cut = len(shown) > max_frames
    keep = shown[:max(1, max_frames - 1)] if cut and user is not None and user >= max_frames else shown[:max_frames]
    lines = [f"{'> ' if i == user else '  '}{frame.name} ({frame.file}:{frame.line})" for i, frame in enumerate(keep)]
    if cut:
        lines.append("  " + DOTS)
        if user is not None and user >= len(keep):
            frame = shown[user]
            lines.append(f"> {frame.name} ({frame.file}:{frame.line})")
    return lines


def analysis_block_text(prefix: str, title: str, cause: str, exact_cause: str | None, graph_hash: str,
                        num_inputs: int, num_outputs: int, frames, max_frames: int,
                        extra: list[tuple[str, list[str]]] = (), graph_name: str | None = None) -> str:
    """A Compilation or Execution Analysis block, with optional extra sections after the cause.

    Args:
      prefix: `Compilation Analysis: ` or `Execution Analysis: `, at the start of every line.
      title: `Compilation Cause` or `Execution Cause`.
      cause: PyTorch/XLA's cause line.
      exact_cause: what xladev knows more than that line says, printed after it (``xladev: ...``); None when the
        line says it all.
      graph_hash, num_inputs, num_outputs: the Graph Info.
      frames: the Python stack, innermost first (`frame_lines`).
      max_frames: PT_XLA_DEBUG_MAX_FRAME.
      extra: (heading, lines) sections after the cause (the recompilation diff).
      graph_name: a compiled region's name: a "Graph Name" line, as PyTorch/XLA writes it, when set.

    Returns:
      The block's text.
    """
    p = prefix
    lines = ["", f"{p}{RULE_EQ}", f"{p}{title}", f"{p}  {cause}"]
    if exact_cause:  # after PyTorch/XLA's line: its parsers read only the line right after "... Cause"
        lines.append(f"{p}  {XLADEV_CAUSE_PREFIX}{exact_cause}")
    for heading, body in extra:
        lines.append(f"{p}{heading}")
        lines.extend(f"{p}  {line}" for line in body)
    lines += [
        f"{p}Graph Info: ",
        *([f"{p}  Graph Name: {graph_name}"] if graph_name else []),
        f"{p}  Graph Hash: {graph_hash}",
        f"{p}  Number of Graph Inputs: {num_inputs}",
        f"{p}  Number of Graph Outputs: {num_outputs}",
        f"{p}Python Frame Triggered Execution: ",
    ]
    lines += [f"{p}{line}" for line in frame_lines(frames, max_frames)]
    lines += [f"{p}{RULE_DASH}", f"{p}{RULE_EQ}"]
    return "\n".join(lines) + "\n"


def _gb(memory: dict, key: str) -> str:
    # PyTorch/XLA prints "Unknown " before the unit where XLA's memory analysis has no such size: never a 0 it
    # did not measure.
    n = memory.get(key)
    return "Unknown  GB" if n is None else f"{n / 1024 ** 3:.6f} GB"


def post_compilation_block(memory: dict) -> str:
    """PyTorch/XLA's "Post Compilation Analysis" block of a compiled graph: its sizes in GB, in its order.

    Args:
      memory: XLA's memory analysis in bytes (`argument`, `output`, `alias`, `temp`, `generated_code`); a size
        missing from it prints as `Unknown`.

    Returns:
      The block's text.
    """
    p = "Post Compilation Analysis: "
    lines = ["", f"{p}{RULE_EQ}", *(f"{p}{size.printed}: {_gb(memory, key)}" for key, size in SIZES.items()),
             f"{p}{RULE_DASH}", f"{p}{RULE_EQ}"]
    return "\n".join(lines) + "\n"


# A graph that failed, written outside any block: what happened to it, then where its HLO was saved.
FAILED_TO_COMPILE, FAILED_WHILE_RUNNING, COULD_NOT_RUN = "failed to compile", "failed while running", "could not run"
FAILURE_VERBS = {"compile": FAILED_TO_COMPILE, "execute": FAILED_WHILE_RUNNING}  # by a failure's kind
_FAILURE_RE = re.compile(r"graph (\w+) (" + "|".join(map(re.escape, (FAILED_TO_COMPILE, FAILED_WHILE_RUNNING,
                                                                      COULD_NOT_RUN)))
                         + r")(?: \((?:[^()]|\([^()]*\))*\))?: ?(.*)$")  # the optional part: which process, in ()
_FAILURE_HLO_RE = re.compile(r"its HLO is saved at (.+)$")


def failure_lines(prefix: str, graph_hash: str, verb: str, message: str, hlo_path: str = "",
                  process: str = "") -> str:
    """The lines of a graph that failed (xladev's, outside any block), the first after a blank line.

    Args:
      prefix: `Compilation Analysis: ` or `Execution Analysis: `.
      graph_hash: the graph.
      verb: `FAILED_TO_COMPILE`, `FAILED_WHILE_RUNNING`, or `COULD_NOT_RUN` (refused before it ran).
      message: what XLA or the runtime said, its first line.
      hlo_path: where its HLO was saved ("" for none: no second line).
      process: which process of a job it was (`rank 1 (pid 4242, host)`), "" alone.

    Returns:
      The text.
    """
    where = f" ({process})" if process else ""
    text = f"\n{prefix}graph {graph_hash} {verb}{where}: {message}\n"
    return text + (f"{prefix}its HLO is saved at {hlo_path}\n" if hlo_path else "")


def failure_of(text: str) -> tuple[str, str, str] | None:
    """A failure's first line read back (`failure_lines`).

    Returns:
      ``(graph hash, "compile" or "execute", message)``, or None when `text` is not one.
    """
    match = _FAILURE_RE.search(text)
    if match is None:
        return None
    return match.group(1), "compile" if match.group(2) == FAILED_TO_COMPILE else "execute", match.group(3)


def saved_hlo_of(text: str) -> str | None:
    """The path of a failure's second line (`failure_lines`), or None when `text` is not one."""
    match = _FAILURE_HLO_RE.search(text)
    return match.group(1).strip() if match else None


# ---------------------------------------------------------------- reading


@dataclasses.dataclass
class GraphEvent:
    """One Compilation or Execution Analysis block.

    Attributes:
      kind: ``compile`` or ``execute``.
      line: line number of the block's first line.
      cause: the printed cause (lines joined by ``; ``).
      graph_hash: the graph hash.
      inputs: number of graph inputs.
      outputs: number of graph outputs.
      frames: the Python frames as printed, innermost first.
      site: the first frame outside torch, torch_xla, jax and xladev, as ``file:line`` (the log reader's).
      function: the function of that frame.
      frames_cut: True when PT_XLA_DEBUG_MAX_FRAME cut the frame list.
      recompilation: xladev's "Recompilation Cause" lines (what changed), when present.
      computation_hash: the ``Computation hash:`` printed after a compile.
      sizes: post-compilation sizes in bytes (input_bytes, output_bytes, ...).
      name: the graph's name (PyTorch/XLA's ``Graph Name``), when it has one.
      user_frame: the index in `frames` of the frame xladev marked as the user's (``> ``), else None.
    """

    kind: str
    line: int
    cause: str = ""
    graph_hash: str = ""
    inputs: int | None = None
    outputs: int | None = None
    frames: list[str] = dataclasses.field(default_factory=list)
    recompilation: list[str] = dataclasses.field(default_factory=list)
    site: str = ""
    function: str = ""
    frames_cut: bool = False
    computation_hash: str = ""
    sizes: dict[str, float] = dataclasses.field(default_factory=dict)
    name: str = ""
    user_frame: int | None = None


def post_compilation_size(body: str) -> tuple[str, float] | None:
    """One size of a Post Compilation Analysis line.

    Args:
      body: the line after its ``Post Compilation Analysis: `` prefix.

    Returns:
      ``(column, bytes)`` (`POST_COMPILE_FIELDS`); None for a line without a size (a rule, an ``Unknown`` size).

    Raises:
      ValueError: the size is not a number.
    """
    match = _POST_SIZE_RE.search(body)
    if match is None:
        return None
    try:
        size = float(match.group(2)) * 1024**3
    except ValueError:
        raise ValueError(f"unreadable size {match.group(2)!r}") from None
    return POST_COMPILE_FIELDS[match.group(1)], size


class AnalysisBlockReader:
    """Reads analysis blocks line by line into `GraphEvent`s (`events`), each as its block closes.

    Compilation and Execution blocks may interleave (each prefix has its own open block); a Post Compilation
    block's sizes go to the last compile block. A subclass may keep less than every block (`_emit`), and read the
    ``... Analysis:`` lines outside a block (`_outside_block`).
    """

    def __init__(self, warn: Callable[..., None]) -> None:
        """Creates a reader with no block open.

        Args:
          warn: called with (line, message) for malformed blocks, and ``at_end=True`` for a block that the
            end of the input cut short.
        """
        self._warn = warn
        self.events: list[GraphEvent] = []
        self._open: dict[str, GraphEvent | None] = {"Compilation": None, "Execution": None}
        self._section: dict[str, str] = {"Compilation": "", "Execution": ""}
        self._last_compile: GraphEvent | None = None

    def feed_analysis(self, lineno: int, text: str) -> bool:
        """Reads one line, if it is an analysis line.

        Args:
          lineno: its 1-based line number.
          text: the line without its newline (anything may come before its ``... Analysis:`` prefix).

        Returns:
          True when the line was an analysis line.
        """
        match = ANALYSIS_RE.search(text)
        if match is None:
            return False
        prefix, body = match.group(1), match.group(2)
        if prefix == "Post Compilation":
            self._post_compilation_line(lineno, body)
        elif not self._block_line(lineno, prefix, body):
            self._outside_block(lineno, body.strip())
        return True

    def blocks_open(self) -> bool:
        """True while a Compilation or Execution block is open."""
        return self._open["Compilation"] is not None or self._open["Execution"] is not None

    def finish(self) -> None:
        """Closes blocks left open at the end of the input, with a warning each."""
        for prefix, event in self._open.items():
            if event is not None:
                self._warn(event.line, f"{prefix} Analysis block cut short (end of input)", at_end=True)
                self._close(event)
                self._open[prefix] = None

    def _emit(self, event: GraphEvent) -> None:
        """A block closed: kept in `events`."""
        self.events.append(event)

    def _outside_block(self, lineno: int, stripped: str) -> None:
        """An analysis line outside any block that opens none (xladev's lines for a failed graph): none read here."""

    def _close(self, event: GraphEvent) -> None:
        if event.kind == "compile":
            self._last_compile = event  # its Post Compilation block follows
        self._emit(event)

    def _post_compilation_line(self, lineno: int, body: str) -> None:
        if self._last_compile is None:
            return
        try:
            found = post_compilation_size(body)
        except ValueError as error:
            self._warn(lineno, str(error))
            return
        if found is not None:
            self._last_compile.sizes[found[0]] = found[1]

    def _block_line(self, lineno: int, prefix: str, body: str) -> bool:
        """Reads a line of a Compilation or Execution block; False for one outside a block that opens none."""
        stripped = body.strip()
        event = self._open[prefix]
        if stripped.startswith("====="):
            if event is not None and self._section[prefix] != "closing":
                self._warn(event.line, f"{prefix} Analysis block cut short (no closing rule)")
                self._close(event)
                event = None
            if event is None:
                self._open[prefix] = GraphEvent("compile" if prefix == "Compilation" else "execute", lineno)
                self._section[prefix] = "start"
            else:
                self._open[prefix] = None
            return True
        if event is None:
            if stripped not in _CAUSE_TITLES:
                return False
            event = self._open[prefix] = GraphEvent("compile" if prefix == "Compilation" else "execute", lineno)
        section = self._section[prefix]
        if stripped.startswith("-----"):
            self._close(event)
            self._section[prefix] = "closing"
        elif stripped in _CAUSE_TITLES:
            self._section[prefix] = "cause"
        elif stripped == "Recompilation Cause":
            # xladev's section saying what changed since the site's previous graph.
            self._section[prefix] = "recompilation"
        elif stripped.startswith("Graph Info:"):
            self._section[prefix] = "graph"
        elif stripped.startswith("Python Frame Triggered Execution:"):
            self._section[prefix] = "frames"
        elif not body.startswith(" ") and stripped.endswith(":"):
            # A section this reader does not use (xladev's Process:, Collectives:, Sharding:): its lines are not
            # the cause's.
            self._section[prefix] = "other"
        elif section == "recompilation" and stripped:
            event.recompilation.append(stripped)
        elif section == "cause" and stripped.startswith(XLADEV_CAUSE_PREFIX):
            event.cause = stripped[len(XLADEV_CAUSE_PREFIX):]  # xladev's exact cause replaces PyTorch/XLA's guess
        elif section == "cause" and stripped:
            event.cause = f"{event.cause}; {stripped}" if event.cause else stripped
        elif section == "graph":
            self._graph_info_line(lineno, event, stripped)
        elif section == "frames" and stripped:
            if set(stripped) == {"."}:
                event.frames_cut = True
            elif stripped.startswith("> "):  # xladev marks the first user frame: the site, whatever its path
                event.frames.append(stripped[2:])
                event.user_frame = len(event.frames) - 1
            else:
                event.frames.append(stripped)
        return True

    def _graph_info_line(self, lineno: int, event: GraphEvent, stripped: str) -> None:
        key, _, value = stripped.partition(":")
        value = value.strip()
        try:
            if key == "Graph Hash":
                event.graph_hash = value
            elif key == "Graph Name":
                event.name = value
            elif key == "Number of Graph Inputs":
                event.inputs = int(value)
            elif key == "Number of Graph Outputs":
                event.outputs = int(value)
        except ValueError:
            self._warn(lineno, f"unreadable {key.lower()} {value!r}")
