"""`torch_xla.backends` on xladev: the matmul precision setting.

xladev lowers every matmul and convolution at XLA's highest precision (`lax.Precision.HIGHEST`), the most
exact level PyTorch/XLA offers. The setting is kept and read back as PyTorch/XLA keeps it; a lower level
('high', 'default') is computed at the highest all the same: more exact than asked, never less.
"""

from __future__ import annotations

from typing import Literal

from torch_xla import _xladev

__all__ = ["get_mat_mul_precision", "set_mat_mul_precision"]

_LEVELS = ("default", "high", "highest")
_setting = {"precision": "highest"}


def set_mat_mul_precision(precision: Literal["default", "high", "highest"]) -> None:
    """Records the matmul precision for float32 inputs (xladev computes at 'highest' whatever the level).

    Raises:
      ValueError: not one of 'default', 'high', 'highest'.
    """
    if precision not in _LEVELS:
        raise ValueError(f"Invalid precision: {precision}. Must be one of {', '.join(_LEVELS)}.")
    _setting["precision"] = precision


def get_mat_mul_precision() -> str:
    """The level last set ('highest' by default, the one xladev computes at)."""
    return _setting["precision"]


__getattr__ = _xladev.module_getattr(__name__)
