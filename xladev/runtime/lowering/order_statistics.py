"""Order statistics: median, nanmedian, kthvalue, mode."""

from __future__ import annotations
