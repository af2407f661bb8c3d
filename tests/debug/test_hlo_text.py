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


def _canonical(text: str) -> str:
    """The module as XLA prints it with every name canonical (`tmp_0`, ...): what the program is, names aside."""
    from jaxlib import _hlo

    return _hlo.hlo_module_from_text(text).to_string(_hlo.HloPrintOptions.canonical())


def test_instructions_are_named_after_their_opcodes_as_pytorch_xla_names_them():
    from xladev.runtime.api.introspect import graph_of, lowered

    x = torch.randn(16, 20).to(torch.bfloat16).to(xladev.device())
    w = torch.randn(20, 3).to(xladev.device())
    with torch.autocast("xla"):
        y = torch.softmax(x, dim=1)
    out = (y.float() @ w).sum(0)
    hlo = get_tensors_hlo([out])
    # PyTorch/XLA's test_autocast_xla.py reads "an exponential in f32" from one line, through its name.
    assert re.search(r".*exponential.*f32.*exponential.*f32", hlo), hlo
    assert re.search(r"%exponential\.\d+ = f32\[16,20\]\{1,0\} exponential\(f32\[16,20\]\{1,0\} %subtract\.\d+\)", hlo)
    assert re.search(r"%dot\.\d+ = f32\[16,3\]\{1,0\} dot\(", hlo)
    # Parameters are p<N>, in the entry's signature too.
    entry = hlo[hlo.index("ENTRY %"):]
    assert re.match(r"ENTRY %\S+ \(p0\.\d+: bf16\[16,20\], p1\.\d+: f32\[20,3\]\)", entry), entry[:120]
    # Each name is defined once, and every reference is to a defined instruction or computation.
    defined = re.findall(r"^\s+(?:ROOT )?%([\w.\-]+) = ", hlo, re.M)
    computations = re.findall(r"^(?:ENTRY )?%([\w.\-]+) \(", hlo, re.M)
    assert len(defined) == len(set(defined)) and set(re.findall(r"%([\w.\-]+)", hlo)) <= set(defined) | set(
        computations)
    # Only the names changed: the same program as jax's own text, printed with canonical names.
    assert _canonical(hlo) == _canonical(lowered(graph_of([out])).as_text(dialect="hlo"))


def test_renaming_leaves_a_module_it_cannot_read_whole():
    from xladev.runtime.lowering.hlo_names import opcode_names

    module = ("HloModule m\n\nENTRY %main.1 (a.1: f32[]) -> f32[] {\n  %a.1 = f32[] parameter(0)\n"
              "  ROOT %neg.2 = f32[] negate(f32[] %a.1)\n}\n")
    assert opcode_names(module) == ("HloModule m\n\nENTRY %main.1 (p0.2: f32[]) -> f32[] {\n"
                                    "  %p0.2 = f32[] parameter(0)\n  ROOT %negate.3 = f32[] negate(f32[] %p0.2)\n}\n")
    unread = module.replace("  ROOT %neg.2", "  something else\n  ROOT %neg.2")
    assert opcode_names(unread) == unread  # a line it does not know: the text as it was, never half renamed
    unclosed = module.rstrip("}\n")
    assert opcode_names(unclosed) == unclosed
