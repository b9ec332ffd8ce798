from types import SimpleNamespace

import pytest
import torch

from regionfed.runtime.pooled import region_balancing_weights, reweighting_is_identity


def test_region_balancing_gives_every_region_equal_total_weight(tiny_federation):
    weights = region_balancing_weights(tiny_federation)
    sizes = tiny_federation.region_sizes("train")
    assert weights.shape == (sum(sizes.values()),)
    offset, per_region = 0, {}
    for client in tiny_federation.clients:
        n = len(client.train)
        per_region[client.region] = per_region.get(client.region, 0.0) \
            + float(weights[offset:offset + n].sum())
        offset += n
    total = float(weights.sum())
    for region in sizes:
        assert per_region[region] == pytest.approx(total / len(sizes))
    assert float(weights.mean()) == pytest.approx(1.0)
    assert torch.all(weights > 0)


class _Sized:
    """A federation stand-in: clients (region, training examples)."""

    def __init__(self, clients):
        self.clients = [SimpleNamespace(region=r, train=[0] * n) for r, n in clients]

    def region_sizes(self, split):
        sizes = {}
        for c in self.clients:
            sizes[c.region] = sizes.get(c.region, 0) + len(c.train)
        return sizes


def test_reweighting_is_the_identity_only_where_regions_hold_the_same_data():
    # 2 regions × 6 examples (split 2 + 4 and 3 + 3): every weight 12 / (2 · 6) = 1
    assert reweighting_is_identity(_Sized([("a", 2), ("a", 4), ("b", 3), ("b", 3)]))
    # 6 and 7 examples: weights 13/12 and 13/14
    assert not reweighting_is_identity(_Sized([("a", 2), ("a", 4), ("b", 3), ("b", 4)]))
