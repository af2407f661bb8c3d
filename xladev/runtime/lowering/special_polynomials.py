"""Orthogonal polynomials of torch.special (Chebyshev, Hermite, Laguerre, Legendre)."""

from __future__ import annotations
