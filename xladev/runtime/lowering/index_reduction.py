"""Indexed reductions and writes: index_reduce, index_put with masks, put, segment_reduce."""

from __future__ import annotations
