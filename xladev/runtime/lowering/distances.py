"""Distances: cdist, pdist, dist."""

from __future__ import annotations
