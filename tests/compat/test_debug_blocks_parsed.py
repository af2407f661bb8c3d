"""PyTorch/XLA's debug-tool tests would read xladev's PT_XLA_DEBUG analysis blocks: a parser to their rules.

PyTorch/XLA's test/debug_tool/test_pt_xla_debug.py and test_mp_pt_xla_debug.py run a script with
PT_XLA_DEBUG_LEVEL (or PT_XLA_DEBUG) and PT_XLA_DEBUG_FILE, read the file as bytes lines and pull fields out
by position (their helpers are in test/debug_tool/extract_debug_helper.py):

- a cause is the whole line right after each line holding "Compilation Cause" / "Execution Cause";
- a graph's info is read from the lines right after each line holding "Graph Info": an optional
  "Graph Name", then "Graph Hash", "Number of Graph Inputs", "Number of Graph Outputs", each matched as
  "Analysis: <field>: <value>" on its own consecutive line;
- a post-compilation analysis is the five lines right after a line holding "Post Compilation Analysis"
  (input, output, aliased, intermediate and program sizes, in that order);
- a block's frames are every line from "Python Frame Triggered Execution" up to (not including) the next
  line holding "Analysis: ----------------"; each such dash line closes one entry, so the post-compilation
  block adds an empty one.

`DebugFile` below is our own parser following those rules. One real `python -m xladev.run` of
debug_blocks_script.py (PyTorch/XLA's scenarios, written against `torch_xla`) at PT_XLA_DEBUG_LEVEL=2 gives
one debug file per scenario, and each test asserts what PyTorch/XLA's test asserts for that scenario, and
that xladev's own lines (the exact cause, the recompilation cause) do not move any field those rules read.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

MAX_FRAME = 8  # PT_XLA_DEBUG_MAX_FRAME's default
SCRIPT = Path(__file__).with_name("debug_blocks_script.py")


class ParseError(AssertionError):
    """A field is not where PyTorch/XLA's parsers look for it (theirs would crash or read garbage)."""


@dataclasses.dataclass(frozen=True)
class GraphInfo:
    name: str
    hash: str
    num_input: int
    num_output: int


class DebugFile:
    """A PT_XLA_DEBUG_FILE read as PyTorch/XLA's debug-tool tests read it: bytes lines, fields by position.

    Args:
      data: the file's bytes.
    """

    def __init__(self, data: bytes) -> None:
        self.lines = [line.decode() for line in data.splitlines(keepends=True)]

    def causes(self, heading: str) -> list[str]:
        """The line after each line holding `heading` ("Compilation Cause" or "Execution Cause"), newline kept."""
        return [self.lines[i + 1] for i, line in enumerate(self.lines) if heading in line]

    def graph_infos(self) -> list[GraphInfo]:
        """Each "Graph Info" line's fields, read from the consecutive lines after it.

        Raises:
          ParseError: a field is missing or out of place.
        """
        infos, name = [], ""  # as theirs, a graph name carries over to later blocks that have none
        for i, line in enumerate(self.lines):
            if "Graph Info" not in line:
                continue
            at = i + 1
            if "Graph Name" in self.lines[at]:
                name = self._field(at, "Graph Name")
                at += 1
            graph_hash = self._field(at, "Graph Hash")
            inputs = self._field(at + 1, "Number of Graph Inputs")
            outputs = self._field(at + 2, "Number of Graph Outputs")
            infos.append(GraphInfo(name, graph_hash, int(inputs), int(outputs)))
        return infos

    def _field(self, index: int, field: str) -> str:
        line = self.lines[index] if index < len(self.lines) else ""
        match = re.search(rf" Analysis: +{re.escape(field)}: *(.+)", line)
        if match is None:
            raise ParseError(f"line {index + 1} should hold {field!r}: {line!r}")
        return match.group(1)

    def post_compilations(self) -> list[list[str]]:
        """The five sizes after each "Post Compilation Analysis" block start, as written after each label.

        Raises:
          ParseError: a label is missing or out of place.
        """
        labels = ("Graph input size: ", "Graph output size: ", "Aliased Input size: ",
                  "Intermediate tensor size: ", "Compiled program size: ")
        found, i = [], 0
        while i < len(self.lines):
            if "Post Compilation Analysis" in self.lines[i]:
                sizes = []
                for offset, label in enumerate(labels, 1):
                    line = self.lines[i + offset]
                    if label not in line:
                        raise ParseError(f"line {i + offset + 1} should hold {label!r}: {line!r}")
                    sizes.append(line.split(label)[1].strip())
                found.append(sizes)
                i += 7  # the block's five sizes and its two closing rules
            i += 1
        return found

    def python_frames(self) -> list[str]:
        """Each frames section (header included, newlines kept); a dash rule outside one adds ''."""
        sections, current, inside = [], [], False
        for line in self.lines:
            if "Python Frame Triggered Execution" in line:
                inside = True
            elif "Analysis: ----------------" in line:
                sections.append("".join(current))
                current, inside = [], False
            if inside:
                current.append(line)
        return sections

    def block_titles(self) -> list[str]:
        """The prefix of each block, in order ("Compilation Analysis", "Post Compilation Analysis"...)."""
        return [line.split(": ")[0] for prev, line in zip([""] + self.lines, self.lines)
                if prev.strip() == "" and line.rstrip().endswith(": " + "=" * 80)]


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PT_XLA_", "XLA_", "XLADEV_"))}
    environment.pop("PYTHONPATH", None)
    environment.update(env)
    return subprocess.run(args, cwd=cwd, env=environment, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, DebugFile]:
    """The debug file of each scenario of one real run of debug_blocks_script.py."""
    folder = tmp_path_factory.mktemp("debug_blocks")
    result = _run([sys.executable, "-m", "xladev.run", str(SCRIPT), str(folder)], folder,
                  PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=str(folder / "debug.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    return {p.stem: DebugFile(p.read_bytes()) for p in folder.glob("*.txt") if p.name != "debug.txt"}


def _one_graph_compiled_and_run(f: DebugFile, cause: str) -> list[GraphInfo]:
    """PyTorch/XLA's checks of a scenario that compiles one graph and runs it once, at level 2."""
    executions, compilations, infos = f.causes("Execution Cause"), f.causes("Compilation Cause"), f.graph_infos()
    assert len(executions) == 1 and cause in executions[0]
    assert len(compilations) == 1 and cause in compilations[0]
    assert len(infos) == 2 and infos[0].hash == infos[1].hash  # the compiled graph is the one that ran
    return infos


# --- PyTorch/XLA's scenarios (test_pt_xla_debug.py, test_mp_pt_xla_debug.py) --------------------------------


def test_user_sync(files):
    f = files["user_sync"]
    posts = f.post_compilations()
    assert len(posts) == 1 and all("GB" in size for size in posts[0])
    infos = _one_graph_compiled_and_run(f, "user torch_xla.sync")
    assert (infos[0].num_input, infos[0].num_output) == (1, 1)  # the random seed in, t1 out


def test_step_trace(files):
    infos = _one_graph_compiled_and_run(files["step_trace"], "torch_xla.sync when exiting a profiler StepTrace region")
    assert (infos[0].num_input, infos[0].num_output) == (1, 1)


def test_parallel_loader(files):
    f = files["parallel_loader"]
    executions, compilations, infos = f.causes("Execution Cause"), f.causes("Compilation Cause"), f.graph_infos()
    assert len(executions) == 10 and all("torch_xla.sync in parallel loader at step end" in c for c in executions)
    assert len(compilations) == 1 and "torch_xla.sync in parallel loader at step end" in compilations[0]
    assert len(infos) == 11  # one compilation, ten executions of the same graph: data and 100 in, dummy out
    assert {(i.hash, i.num_input, i.num_output) for i in infos} == {(infos[0].hash, 2, 1)}


def test_print(files):
    infos = _one_graph_compiled_and_run(files["print_tensor"], "user code trying to access tensor value")
    assert (infos[0].num_input, infos[0].num_output) == (1, 1)


def test_frame(files):
    frames = files["frame"].python_frames()
    assert len(frames) == 3  # compilation, post-compilation (empty), execution
    assert frames[1] == ""
    for section in (frames[0], frames[2]):
        lines = section.split("\n")
        # the header, MAX_FRAME frames, the "..........", and the '' after the last newline
        assert len(lines) == MAX_FRAME + 3, section
        assert "sync" in lines[1] and lines[-2].endswith("  " + "." * 10)


def test_launch_as_the_multiprocess_test(files):
    f = files["launch"]
    frames = f.python_frames()
    assert len(f.causes("Execution Cause")) == 1
    assert len(frames) == 3 and "sync" in frames[0]
    assert len(frames[0].split("\n")) == len(frames[2].split("\n")) == MAX_FRAME + 3
    infos = f.graph_infos()
    assert (infos[0].num_input, infos[0].num_output) == (2, 2)  # the seed and 100 in; t1 and t2 out


def test_compile_syncs_before_and_after(files):
    f = files["compile_fn"]
    infos = f.graph_infos()
    assert len(f.causes("Compilation Cause")) == len(f.causes("Execution Cause")) == 2
    assert len(infos) == 4 and infos[0].hash == infos[1].hash and infos[2].hash == infos[3].hash
    assert (infos[0].num_input, infos[0].num_output) == (1, 1)  # the pending t1, synced before the function


def test_compile_causes_and_graph_names(files):
    f = files["compile_fn"]
    compilations = f.causes("Compilation Cause")
    assert "torch_xla.compile clear the pending graph prior calling the target function" in compilations[0]
    assert "torch_xla.compile\n" in compilations[1]
    assert [i.name for i in f.graph_infos()] == ["toy_program_clear_pending"] * 2 + ["toy_program"] * 2


# --- xladev's additions leave every field where those parsers read it ---------------------------------------


def test_blocks_come_in_pytorch_xla_order(files):
    for name, f in files.items():
        titles = f.block_titles()
        assert titles, name
        for i, title in enumerate(titles):  # each compilation is followed by its post-compilation analysis
            if title == "Compilation Analysis":
                assert titles[i + 1] == "Post Compilation Analysis", (name, titles)
        compiled = f.causes("Compilation Cause")
        assert titles.count("Compilation Analysis") == len(compiled) == len(f.post_compilations()), name
        assert titles.count("Execution Analysis") == len(f.causes("Execution Cause")), name
        # every block has its graph info and its frames; post-compilation blocks add an empty frames entry
        assert len(f.graph_infos()) == len(f.causes("Compilation Cause")) + len(f.causes("Execution Cause"))
        assert len(f.python_frames()) == len(titles), name


def test_recompilation_sections_do_not_move_fields(files):
    f = files["recompile"]
    text = "".join(f.lines)
    assert text.count("Recompilation Cause") == 2 and "dim 0: 8 -> 9" in text
    assert [c.strip() for c in f.causes("Compilation Cause")] == ["Compilation Analysis:   user torch_xla.sync"] * 3
    infos = f.graph_infos()
    assert len(infos) == 6 and len({i.hash for i in infos}) == 3
    assert {(i.num_input, i.num_output) for i in infos} == {(2, 1)}  # x and 2 in, the sum out


@pytest.mark.parametrize("scenario,pt_xla_line,xladev_line", [
    ("item_in_step", "most likely user code trying to access tensor value before torch_xla.sync",
     "xladev: user code trying to access tensor value before torch_xla.sync: .item()"),
    ("optimizer_barrier", "user torch_xla.sync", "xladev: mark_step in optimizer_step(barrier=True)"),
])
def test_xladev_cause_line_follows_pytorch_xla_line(files, scenario, pt_xla_line, xladev_line):
    f = files[scenario]
    for heading in ("Compilation Cause", "Execution Cause"):
        causes = f.causes(heading)
        assert causes and pt_xla_line in causes[0]
        after = f.lines[f.lines.index(causes[0]) + 1]
        assert after.rstrip().endswith(xladev_line), after
