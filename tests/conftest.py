import os

import learning_outcomes
import pytest
from helpers import two_region_quadratics


def pytest_configure(config):
    """Under pytest-xdist, each worker gets its share of the cores as torch threads (two
    workers × two threads on two cores would only fight over them), unless
    ``OMP_NUM_THREADS`` says how many."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        import torch

        threads = max(1, len(os.sched_getaffinity(0)) // workers)
        torch.set_num_threads(threads)
        # runs started by the tests keep this share instead of measuring the load
        # (regionfed.runtime.threads), which the other worker makes vary
        os.environ["OMP_NUM_THREADS"] = str(threads)


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
    return learning_outcomes.tiny_federation()


@pytest.fixture(scope="session")
def tiny_task(tiny_federation):
    from regionfed.models.registry import build_task

    return build_task(learning_outcomes.TINY_QUERY_MODEL, tiny_federation)
