"""`xladev report` as a user runs it (a subprocess) on damaged .gz copies of a real run's outputs.

A tiny training run writes a real XLA_METRICS_FILE and event log once for the module; each test
damages a gzip of one of them (cut or corrupt, in the middle or before its first record) and checks
what the user sees: the verdict line and its reason, the exit status with and without
``--fail-on warning``, the JSON verdict, and never a traceback. (``--fail-on error`` is checked in
process, in test_no_complete_record.py.)
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])

_TRAIN = """\
import torch, torch.nn as nn, xladev
dev = xladev.device()
torch.manual_seed(0)
model = nn.Linear(6, 4).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    x = torch.randn(8, 6).to(dev)
    opt.zero_grad(); loss = model(x).pow(2).mean(); loss.backward(); opt.step()
    xladev.mark_step()
"""


@pytest.fixture(scope="module")
def run_outputs(tmp_path_factory) -> dict[str, bytes]:
    """The metrics file and event log of a real 30-step run, by kind."""
    directory = tmp_path_factory.mktemp("run")
    script = directory / "train.py"
    script.write_text(_TRAIN)
    env = dict(os.environ, XLA_METRICS_FILE=str(directory / "metrics.txt"),
               XLADEV_EVENT_LOG=str(directory / "run.events.jsonl"), PYTHONPATH=ROOT)
    env.pop("WORLD_SIZE", None)
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=300, capture_output=True)
    return {"metrics": (directory / "metrics.txt").read_bytes(),
            "events": (directory / "run.events.jsonl").read_bytes()}


def _first_record_end(kind: str, data: bytes) -> int:
    """Where the first complete record ends: the second step record, or the event after the log's header."""
    if kind == "metrics":
        return data.index(b"\n[MetricsData", 1) + 1
    return data.index(b"\n", data.index(b"\n") + 1) + 1


def _damaged(kind: str, data: bytes, damage: str) -> bytes:
    packed = gzip.compress(data, mtime=0)
    middle = len(packed) // 2
    if damage == "cut in the middle":
        return packed[:middle]
    if damage == "corrupt in the middle":  # every bit of 16 bytes flipped: sure to differ
        return packed[:middle] + bytes(b ^ 0xFF for b in packed[middle:middle + 16]) + packed[middle + 16:]
    # Cut early: the longest cut that still gives out less than the first record.
    end = _first_record_end(kind, data)
    cut = max(n for n in range(11, len(packed))
              if len(zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(packed[:n])) < end)
    return packed[:cut]


def _report(path: Path, *options: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "xladev_cli", "report", path.name, "--width", "400", *options],
                            capture_output=True, text=True, timeout=120, cwd=path.parent)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def _verdict_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.split()[:1] in (["UNKNOWN"], ["WARNING"], ["HEALTHY"],
                                                                           ["ERROR"]))


@pytest.mark.parametrize("kind", ["metrics", "events"])
@pytest.mark.parametrize("damage", ["cut in the middle", "corrupt in the middle"])
def test_damaged_gzip_is_reported_on_its_complete_records_with_a_warning(run_outputs, tmp_path, kind, damage):
    path = tmp_path / f"{kind}.gz"
    path.write_bytes(_damaged(kind, run_outputs[kind], damage))
    plain = _report(path)
    line = _verdict_line(plain.stdout)
    what = "ends early (cut off after" if damage.startswith("cut") else "is corrupt"
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    assert line.startswith("WARNING") and f"{path.name} is damaged: the gzip data {what}" in line, line
    gated = _report(path, "--fail-on", "warning", "-f", "json")
    data = json.loads(gated.stdout)
    assert gated.returncode == 1 and data["verdict"] == "warning"
    finding = next(f for f in data["findings"] if f["rule"] == "damaged-input")
    read = "complete metrics report" if kind == "metrics" else "steps of an xladev event log"
    assert read in finding["evidence"][1] and finding["numbers"]["lines_read"] > 0, finding
    summary = data["summary"]
    if damage.startswith("cut"):  # before a cut the text is exact: the run as of its last complete record
        # (The run compiles its one graph in step 1 and runs it from the cache after that; an event log cut
        # inside a step has that step's execution but not yet its step record.)
        assert 1 <= summary["steps"] < 30 and summary["steps"] <= summary["executions"] <= summary["steps"] + 1
        assert summary["compiles"] == 1 and summary["cached_compiles"] == summary["executions"] - 1, summary
    else:  # corrupt data may decode as text that reads as valid for a while: only the bound is sure
        assert summary["steps"] < 30, summary


@pytest.mark.parametrize("kind", ["metrics", "events"])
@pytest.mark.parametrize("damage", ["cut early", "corrupt early"])
def test_gzip_damaged_before_its_first_record_is_unknown_and_exits_2(run_outputs, tmp_path, kind, damage):
    path = tmp_path / f"{kind}.gz"
    data = run_outputs[kind]
    if damage == "cut early":
        path.write_bytes(_damaged(kind, data, damage))
        reason = "the gzip data ends early (cut off after"
    else:
        packed = bytearray(gzip.compress(data, mtime=0))
        packed[12:28] = bytes(16)  # inside the first block's code tables, right after the 10-byte gzip header
        path.write_bytes(bytes(packed))
        reason = "the gzip data is corrupt"
    plain = _report(path)
    line = _verdict_line(plain.stdout)
    assert plain.returncode == 2, plain.stdout
    assert line.startswith("UNKNOWN") and f"No complete record to judge the run by: {reason}" in line, line
    assert plain.stderr.startswith(f"xladev report: error: {path.name}: {reason}") and plain.stderr.count("\n") == 1
    gated = _report(path, "--fail-on", "warning", "-f", "json")
    data = json.loads(gated.stdout)
    assert gated.returncode == 2 and data["verdict"] == "unknown" and reason in data["headline"]
