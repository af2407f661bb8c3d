"""embedding_bag and its backward."""

from __future__ import annotations
