"""How the adapter shares torch_xla's tracing samples (`LazyTracing`, one per traced op, stamped when it ends)
among the steps whose barriers came between two reads: each sample goes to the first barrier at or after it,
those after the last barrier to the last step. Checked against the rule applied one sample at a time."""

from __future__ import annotations

import bisect

from hypothesis import given, settings, strategies as st

from xladev.attach._harvest import samples_by_barrier


def _one_at_a_time(samples, ends):
    spent = [[0.0, 0] for _ in ends]
    for when, value in samples:
        slot = spent[min(bisect.bisect_left(ends, when), len(ends) - 1)]
        slot[0] += value
        slot[1] += 1
    return spent


_times = st.integers(0, 50)  # few distinct times, so that samples fall on barriers and share stamps
_samples = st.lists(st.tuples(_times, st.integers(1, 10**6)), max_size=60).map(sorted)
_ends = st.lists(_times, min_size=1, max_size=8, unique=True).map(sorted)


@settings(max_examples=300, deadline=None)
@given(_samples, _ends)
def test_each_step_gets_the_samples_up_to_its_barrier(samples, ends):
    samples = [(when / 10, float(value)) for when, value in samples]
    ends = [end / 10 for end in ends]
    assert samples_by_barrier(samples, ends) == _one_at_a_time(samples, ends)


def test_a_sample_stamped_at_a_barrier_is_that_barriers_step():
    assert samples_by_barrier([(1.0, 5.0), (2.0, 7.0), (2.5, 1.0)], [1.0, 2.0, 3.0]) == [[5.0, 1], [7.0, 1], [1.0, 1]]


def test_no_samples_gives_each_step_nothing():
    assert samples_by_barrier([], [1.0, 2.0]) == [[0.0, 0], [0.0, 0]]
