import numpy as np
import pytest
import torch
from helpers import run_rounds

from regionfed.algorithms.base import ClientResult, check_finite
from regionfed.algorithms.fedavg import FedAvg
from regionfed.errors import NumericalError


def test_one_round_is_the_data_weighted_mean_of_client_models(two_region_clients):
    clients, view = two_region_clients
    strategy = FedAvg()
    run_rounds(strategy, clients, view, rounds=1)
    # one step of lr 0.5 from 0 lands halfway to each target; weights 10/30/20/20 of 80
    expected = sum(n * 0.5 * clients[c].target for c, n in view.num_examples.items()) / 80
    assert torch.allclose(strategy.params, expected)


def test_converges_to_the_minimiser_of_the_weighted_objective(two_region_clients):
    clients, view = two_region_clients
    strategy = FedAvg()
    run_rounds(strategy, clients, view, rounds=40)
    optimum = sum(n * clients[c].target for c, n in view.num_examples.items()) / 80
    assert torch.allclose(strategy.params, optimum, atol=1e-6)


def test_server_learning_rate_scales_the_step(two_region_clients):
    clients, view = two_region_clients
    plain, half = FedAvg(), FedAvg(server_lr=0.5)
    run_rounds(plain, clients, view, rounds=1)
    run_rounds(half, clients, view, rounds=1)
    assert torch.allclose(half.params, 0.5 * plain.params)


def test_poisson_sampling_rate(two_region_clients):
    _, view = two_region_clients
    strategy = FedAvg(sample_rate=0.25)
    strategy.setup(torch.zeros(2), view, np.random.default_rng(1))
    counts = [len(strategy.sample_clients()) for r in range(4000)]
    assert np.mean(counts) == pytest.approx(1.0, abs=0.05)  # 4 clients × q = 0.25
    assert min(counts) == 0  # Poisson: a round may sample nobody
    with pytest.raises(ValueError):
        FedAvg(sample_rate=0.0)


def test_empty_round_leaves_the_model_unchanged(two_region_clients):
    _, view = two_region_clients
    strategy = FedAvg()
    strategy.setup(torch.ones(2), view, np.random.default_rng(0))
    assert strategy.aggregate_train(1, []) == {"clients": 0}
    assert torch.equal(strategy.params, torch.ones(2))


def test_non_finite_updates_are_rejected():
    check_finite(torch.ones(3), "ok")
    bad = ClientResult("a/0", "a", torch.tensor([1.0, float("nan")]), 1)
    with pytest.raises(NumericalError, match="a/0"):
        check_finite(bad.update, "client a/0")
    with pytest.raises(NumericalError):
        check_finite(torch.tensor([float("inf")]), "x")
