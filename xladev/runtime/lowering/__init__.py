"""Op lowerings to jax, grouped by kind. Importing this package registers them all."""

from xladev.runtime.lowering import (  # noqa: F401
    complex,
    ctc_loss,
    distances,
    elementwise,
    embedding_bag,
    factories,
    fft,
    histograms,
    index_reduction,
    linalg,
    matmul,
    nn,
    order_statistics,
    reductions,
    resample,
    rnn,
    shape,
    special,
    special_bessel,
    special_polynomials,
)
from xladev.runtime.lowering.registry import LOWERINGS, LoweringContext, lowers

__all__ = ["LOWERINGS", "LoweringContext", "lowers"]
