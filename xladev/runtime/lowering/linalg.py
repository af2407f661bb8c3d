"""torch.linalg and the older linear-algebra ops, through jnp.linalg and jax.scipy.linalg."""

from __future__ import annotations
