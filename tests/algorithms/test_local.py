import torch
from helpers import run_rounds

from regionfed.algorithms.local import LocalOnly


def test_each_client_reaches_its_own_optimum_and_nothing_is_shared(two_region_clients):
    clients, view = two_region_clients
    strategy = LocalOnly()
    run_rounds(strategy, clients, view, rounds=30)
    assert torch.equal(strategy.params, torch.zeros(2))  # the server never moves
    for cid, client in clients.items():
        personal = strategy.eval_params(cid, client.region, client)
        assert torch.allclose(personal, client.target, atol=1e-6)
