"""The CTC loss and its backward."""

from __future__ import annotations
