"""torch.fft, through jnp.fft."""

from __future__ import annotations
