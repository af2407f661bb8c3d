"""Histograms with a static number of bins: histc, histogram, histogramdd."""

from __future__ import annotations
