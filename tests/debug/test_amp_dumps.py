"""The graph dumps show autocast's dtypes: XLA_SAVE_TENSORS_FILE's IR and HLO formats, from a real run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

SCRIPT = """
import torch, xladev
import torch.nn.functional as F
device = xladev.device()
x, w = torch.randn(2, 8).to(device), torch.randn(4, 8).to(device)
with torch.autocast("xla"):
    probabilities = torch.softmax(F.linear(x, w), -1)
xladev.mark_step()
"""


def _dump(tmp_path, fmt: str) -> str:
    path = tmp_path / f"dump.{fmt}"
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, XLA_SAVE_TENSORS_FILE=str(path), XLA_SAVE_TENSORS_FMT=fmt))
    assert result.returncode == 0, result.stderr[-2000:]
    return (tmp_path / f"dump.{fmt}.0").read_text()


@pytest.mark.parametrize("fmt", ["text", "hlo"])
def test_the_dumps_show_the_bf16_matmul_and_the_f32_softmax(tmp_path, fmt):
    dump = _dump(tmp_path, fmt)
    if fmt == "text":
        # The casts to bfloat16 of both operands, the product in bfloat16, the cast back and softmax in float32.
        assert len(re.findall(r"= bf16\[[\d,]+\]\{[\d,]+\} aten::_to_copy\(%\d+\), .*dtype=bf16", dump)) == 2, dump
        assert re.search(r"= bf16\[2,4\]\{1,0\} aten::mm\(", dump), dump
        assert re.search(r"= f32\[2,4\]\{1,0\} aten::_softmax\(", dump), dump
    else:
        assert re.search(r"= bf16\[2,4\]\{1,0\} dot\(", dump), dump
        assert re.search(r"= f32\[2,4\]\{1,0\} exponential\(", dump), dump
