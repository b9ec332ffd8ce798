import os

import pytest
from helpers import two_region_quadratics


def pytest_configure(config):
    """Under pytest-xdist, each worker gets its share of the cores as torch threads (two
    workers × two threads on two cores would only fight over them), unless
    ``OMP_NUM_THREADS`` says how many."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


#: the files that take longest (``pytest --durations``: a Flower deployment ~150 s, the Ray
#: simulations ~35 s, the others 15-40 s each); run first, so that under ``make test`` (whole files
#: per worker, ``--no-loadscope-reorder``) no long file starts last on an otherwise idle run
LONGEST_FIRST = ("runtime/flower/test_deployment.py", "runtime/flower/test_simulation_parity.py",
                 "test_architecture.py", "models/test_image_task.py", "studies/test_sweep.py",
                 "models/test_minilm.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.path.as_posix()
        return next((k for k, name in enumerate(LONGEST_FIRST) if path.endswith(name)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: within a file, and for every other file, the usual order


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
