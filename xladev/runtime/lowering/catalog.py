"""Every lowering module: importing this registers all lowerings (`device.register()` does)."""

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
