import pytest
import torch

from regionfed.runtime.pooled import region_balancing_weights


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
