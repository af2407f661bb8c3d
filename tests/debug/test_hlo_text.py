"""The HLO text xladev gives (`get_tensors_hlo`, `_XLAC._get_xla_tensors_hlo`, HLO dumps) is XLA's own printing, as
PyTorch/XLA's is: every operand with its shape, so one line says what a convert converts from and to."""

from __future__ import annotations

import re

import torch

import xladev
from xladev.debug import get_tensors_hlo


def test_a_convert_line_names_both_types_as_pytorch_xla_prints_it():
    x = torch.randn(16, 10).to(torch.bfloat16).to(xladev.device())
    y = torch.softmax(x.float(), dim=1)
    hlo = get_tensors_hlo([y])
    # PyTorch/XLA's own test (test_autocast_xla.py) reads a bf16 -> f32 convert from one line this way.
    assert re.search(r".*convert.*f32.*convert.*bf16", hlo), hlo
    assert re.search(r"= f32\[16,10\]\{1,0\} convert\(bf16\[16,10\]\{1,0\} %", hlo), hlo
    assert hlo.startswith("HloModule ") and "ENTRY %" in hlo
    assert "metadata=" not in hlo  # the source lines only with XLA_HLO_DEBUG


def test_hlo_debug_adds_the_source_lines():
    with xladev.config.override(ir_debug=True, hlo_debug=True):  # as XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1
        x = torch.ones(4, device=xladev.device())
        hlo = get_tensors_hlo([x * 3])
    assert "metadata=" in hlo and "aten::mul[test_hlo_debug_adds_the_source_lines at test_hlo_text.py:" in hlo
