import pytest
from helpers import two_region_quadratics


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
