"""Complex numbers: building, viewing and conjugating them."""

from __future__ import annotations
