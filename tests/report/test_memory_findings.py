"""Device memory in the report: XLA's out-of-memory messages read as a finding, the per-graph table of XLA's memory
analysis, PyTorch/XLA's "Unknown" for a size XLA did not give, and the budget's accepted forms."""

from __future__ import annotations

import pytest

from tests.report.fragments import make_fragments
from xladev import analysis
from xladev.report import load
from xladev.report.document import Table, report_document
from xladev.schema.units import UnitParseError, parse_memory_size
from xladev.schema.debug_text import post_compilation_block

G = 1024 ** 3


def _graphs_table(report) -> Table:
    return next(t for section in report_document(report).sections for t in section.items
                if isinstance(t, Table) and t.title.startswith("Graphs: device memory"))


def test_pytorch_xlas_out_of_memory_is_the_first_finding_with_the_graphs_sizes(tmp_path):
    path = tmp_path / "out_of_memory.debug.txt"
    path.write_text(make_fragments.out_of_memory())
    report = load(str(path))
    first = report.findings[0]
    assert first.rule == "out-of-memory" and first.severity == "error" and report.verdict() == "error"
    assert first.title == "The device ran out of memory: a graph (needs 29.80GB, limit 15.48GB)"
    assert first.numbers["need_bytes"] == int(29.80 * G) and first.numbers["limit_bytes"] == int(15.48 * G)
    # The C++ logger's line and the raised RuntimeError are one message, seen twice.
    assert first.evidence == ["RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space "
                              "hbm. Used 29.80G of 15.48G hbm. Exceeded hbm capacity by 14.32G. (seen 2 times)"]
    assert first.sources == [f"{path}:25"]  # where it was first read
    table = _graphs_table(report)
    # 1.548000 + 7.922460 - 1.547871 + 12.124478 + 0.028210 GB, from the Post Compilation Analysis.
    assert table.rows == [["5b2d1e4a0f9c", "train.py:94", "1.55GB", "7.92GB", "1.55GB", "12.12GB", "28.89MB",
                           "20.08GB"]]


@pytest.mark.parametrize("line, message, sizes", [
    # jax 0.11.2's error on an H200 (a device check of this change): a graph whose output outgrew the GPU.
    ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 125.82GiB with allocator "
     "GPU_0_bfc on device 0. [executable_name='jit__lambda'] [tf-allocator-allocation-error='']", None,
     {"need": int(125.82 * G)}),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 "
     "bytes.", "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.", {"need": 7406166528}),
    ("2022-04-04 00:27:49.642380: E tensorflow/compiler/xla/xla_client/xla_util.cc:88]   (1) RESOURCE_EXHAUSTED: "
     "Attempting to reserve 6.48G at the bottom of memory. That was not possible. There are 6.78G free, 0B reserved, "
     "and 3.33G reservable.", None, {"need": int(6.48 * G), "free": int(6.78 * G)}),
    ("RESOURCE_EXHAUSTED: graph 3b85 needs 72.39MB of device memory, over the device memory limit of 64.00MB "
     "(XLADEV_DEVICE_MEMORY_LIMIT); it runs at train.py:14 (<module>)", None,
     {"need": int(72.39 * 1024 ** 2), "limit": 64 * 1024 ** 2}),
])
def test_xlas_out_of_memory_wordings_are_read_with_their_sizes(line, message, sizes):
    found = analysis.parse_out_of_memory(line)
    assert found == {"message": message or line[line.index("RESOURCE_EXHAUSTED"):], **sizes}


@pytest.mark.parametrize("line", [
    "Memory usage: 1.2GB", "loss 2.31 (out of 100 steps)", "Killed",
    # XLA's allocator warns so while it compiles, and says it is no failure (seen on an H200 with jax 0.11.2).
    "W1128 01:03:42.679261     630 bfc_allocator.cc:371] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
    "125.87GiB from the lower end with freed_by_count=0. The caller indicates that this is not a failure, but this may "
    "mean that there could be performance gains if more memory were available.",
])
def test_other_lines_are_not_out_of_memory(line):
    assert analysis.parse_out_of_memory(line) is None


def test_a_size_xla_did_not_give_prints_unknown_as_pytorch_xla_does(tmp_path):
    block = post_compilation_block({"argument": G, "output": 0, "alias": 0, "temp": 3 * G})
    assert "Post Compilation Analysis: Graph input size: 1.000000 GB\n" in block
    assert "Post Compilation Analysis: Intermediate tensor size: 3.000000 GB\n" in block
    assert "Post Compilation Analysis: Compiled program size: Unknown  GB\n" in block  # never a 0 it did not measure
    # The report reads the block back: the known sizes, and no total where a part is unknown.
    path = tmp_path / "debug.txt"
    path.write_text(make_fragments.read_before_barrier().split("\nPost Compilation")[0] + "\n" + block)
    assert _graphs_table(load(str(path))).rows == [["5b2d1e4a0f9c", "train.py:94", "1GB", "0B", "0B", "3GB", "-",
                                                    "-"]]


@pytest.mark.parametrize("text, size", [("2GB", 2 * G), ("512MiB", 512 * 1024 ** 2), ("1.5 gb", int(1.5 * G)),
                                        ("2147483648", 2 * G), (" 64KB ", 64 * 1024), ("100B", 100), ("1TiB", 1024 * G)])
def test_memory_sizes_in_the_budgets_forms(text, size):
    assert parse_memory_size(text) == size


@pytest.mark.parametrize("text", ["2 gigs", "-5MB", "0", "1.5XB", "GB", "2G"])
def test_a_malformed_memory_size_names_the_forms(text):
    with pytest.raises(UnitParseError, match="2GB, 512MiB"):
        parse_memory_size(text)
