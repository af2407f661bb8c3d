"""`sys.exit` inside a launched function ends its rank with that status, as under torch.multiprocessing and PyTorch/XLA's
launcher: 0 is a normal end (PyTorch/XLA's TPU tests end every process with `sys.exit(0 if ok else 1)`), another
status a failure naming it. Real processes; the function never touches the device, so no job is joined."""

from __future__ import annotations

import sys

import pytest

import xladev


def _exit_with(rank: int, codes: list) -> None:
    sys.exit(codes[rank])


def test_sys_exit_0_ends_a_rank_normally():
    assert xladev.launch(_exit_with, args=([0, None],), nprocs=2) == [None, None]


def test_sys_exit_with_a_status_fails_naming_the_rank_and_the_status():
    with pytest.raises(xladev.LaunchError, match=r"^xladev\.launch: rank 1 failed: exited with status 3 "
                                                 r"\(sys\.exit\(3\)\)$"):
        xladev.launch(_exit_with, args=([0, 3],), nprocs=2)
