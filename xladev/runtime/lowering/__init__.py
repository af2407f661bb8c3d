"""Op lowerings to jax, grouped by kind. Importing this package registers them all."""

from xladev.runtime.lowering import (  # noqa: F401
    elementwise,
    factories,
    linalg,
    nn,
    reductions,
    resample,
    rnn,
    shape,
    special,
)
from xladev.runtime.lowering.registry import LOWERINGS, LoweringContext, lowers

__all__ = ["LOWERINGS", "LoweringContext", "lowers"]
