import os

import pytest
from helpers import two_region_quadratics


def pytest_configure(config):
    """Under pytest-xdist, each worker gets its share of the cores as torch threads (two
    workers × two threads on two cores would only fight over them)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


@pytest.fixture
def two_region_clients():
    return two_region_quadratics()


@pytest.fixture(scope="session")
def tiny_federation():
    """A small esci-synth federation (2 regions × 3 clients) for runtime tests."""
    from regionfed.data.esci_synth import generate_esci_synth

    return generate_esci_synth(num_queries=600, num_regions=2, clients_per_region=3,
                               vocab_size=1000, seed=0)


@pytest.fixture(scope="session")
def tiny_task(tiny_federation):
    from regionfed.models.registry import build_task
    from regionfed.models.tiny import TinyConfig

    return build_task(TinyConfig(dim=32, heads=2, ffn_dim=64, ngram_buckets=512),
                      tiny_federation)
