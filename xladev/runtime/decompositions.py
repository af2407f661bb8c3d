"""PyTorch's own decompositions, used for ops without a lowering so the lowered op set stays small."""

from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from xladev.runtime.lowering.registry import LOWERINGS

aten = torch.ops.aten

_table = dict(core_aten_decompositions())
_table.update(get_decompositions([
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten.native_dropout_backward,
    aten.logit_backward,
    aten.hardswish, aten.hardswish_backward, aten.hardsigmoid, aten.hardsigmoid_backward,
    aten.elu_backward, aten.softplus_backward, aten.hardtanh_backward, aten.glu, aten.glu_backward,
    aten.binary_cross_entropy, aten.binary_cross_entropy_backward, aten.huber_loss, aten.huber_loss_backward,
    aten.smooth_l1_loss, aten.smooth_l1_loss_backward, aten.soft_margin_loss, aten.soft_margin_loss_backward,
    aten.nll_loss2d_backward, aten.upsample_nearest2d, aten.upsample_bilinear2d,
    aten.im2col, aten.col2im, aten.reflection_pad1d, aten.reflection_pad2d, aten.replication_pad1d,
    aten.replication_pad2d, aten.linalg_vector_norm, aten.norm,
]))

# Lowered ops keep their lowering; decompositions only fill gaps.
DECOMPOSITIONS = {op: fn for op, fn in _table.items() if op not in LOWERINGS}
