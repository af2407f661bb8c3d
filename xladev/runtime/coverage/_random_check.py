"""Random ops in the coverage sweep: checked by distribution, not by value.

The device RNG cannot reproduce the CPU generator's stream, so a random op is checked for what must
hold of any correct sampler: no CPU fallback, the CPU's output shape and dtype, values in the
distribution's support, moments within sampling error, and the same numbers again after the same
`manual_seed`.
"""

from __future__ import annotations

# OpInfo full_name -> how its samples are checked (filled in below).
RANDOM_CHECKS: dict = {}


def check_random(op, *, budget_s: float = 20.0):
    """Checks one random OpInfo by distribution.

    Args:
      op: the OpInfo (its name is a key of RANDOM_CHECKS).
      budget_s: no further sample starts after this many seconds.

    Returns:
      An OpResult; forward "lowered" when every check holds without a CPU fallback.
    """
    raise NotImplementedError(op.full_name)
