"""The alias's collectives beyond xladev's own, in one process: the bucketized list collectives, xla_rendezvous,
and XLA's channel Send/Recv refused by name."""

from __future__ import annotations

import pytest
import torch


def test_bucketized_collectives_keep_the_order_across_buckets(tx):
    dev = torch.device("xla", 0)
    xm = tx.xm
    inputs = [torch.full((2,), float(i), device=dev) for i in range(5)]
    for cap in (0, 160):  # a bucket per tensor; one bucket for all
        results = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, inputs, 2.0, 0, 1, bucket_cap_mb=cap)
        assert [r.cpu().tolist() for r in results] == [[2.0 * i] * 2 for i in range(5)]
        outputs = [torch.zeros(2, device=dev) for _ in inputs]
        assert xm.all_gather_bucketized(inputs, output=outputs, bucket_cap_mb=cap) is outputs
        assert [o.cpu().tolist() for o in outputs] == [[float(i)] * 2 for i in range(5)]
    with pytest.raises(ValueError, match="bucket_cap_mb=-1 must not be negative"):
        xm.all_gather_bucketized(inputs, bucket_cap_mb=-1)


def test_xla_rendezvous_and_channel_send_recv(tx):
    xm = tx.xm
    assert xm.xla_rendezvous(b"p", ordinals=[0], tag="t") == [b"p"] and xm.xla_rendezvous() == [b""]
    with pytest.raises(AttributeError, match=r"^torch_xla\.core\.xla_model\.send is not supported by xladev: .*GPUs "
                                             r"only.*dist\.send/dist\.recv"):
        xm.send(torch.ones(1, device="xla"), 3)
