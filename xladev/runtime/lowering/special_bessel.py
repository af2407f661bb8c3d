"""Bessel, modified Bessel, Airy and spherical Bessel functions of torch.special."""

from __future__ import annotations
