import pytest
from helpers import two_region_quadratics


@pytest.fixture
def two_region_clients():
    return two_region_quadratics()
