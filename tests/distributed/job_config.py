"""Settings shared by the torchrun job (torchrun_job.py) and its tests."""

from examples import transformer

# The transformer example, small: one block, short sequences (each rank compiles its data-parallel step).
TRANSFORMER = transformer.Config(vocab=32, d_model=32, heads=2, layers=1, seq=16, batch=4, dropout=0.0)
TRANSFORMER_STEPS = 4
# The planted run for the report: rank 1 is slow by SLOW_S each step.
PLANTED_STEPS = 6
SLOW_RANK, SLOW_S = 1, 0.3
