import pytest
import torch

from regionfed.algorithms.ditto import Ditto
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.local import LocalOnly
from regionfed.config import TrainingConfig
from regionfed.errors import ConfigError
from regionfed.runtime.simulator import Simulator

SEQUENTIAL = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2,
                            client_batching="off")


def run(strategy, federation, task, training=SEQUENTIAL):
    sim = Simulator(federation, task, training, seed=0)
    return sim, sim.run(strategy)


def test_lambda_zero_personal_models_are_local_training(tiny_federation, tiny_task):
    ditto_sim, ditto = run(Ditto(lam=0.0), tiny_federation, tiny_task)
    local_sim, local = run(LocalOnly(), tiny_federation, tiny_task)
    for cid, client in ditto_sim.clients.items():
        assert torch.equal(client.state["personal"], local_sim.clients[cid].state["params"])
    assert ditto.test["per_client"] == local.test["per_client"]


def test_global_model_is_fedavgs_trained_on_its_own_stream(tiny_federation, tiny_task):
    # the global update is FedAvg's client step; only its shuffling stream differs
    _, ditto = run(Ditto(lam=0.1), tiny_federation, tiny_task)
    _, fedavg = run(FedAvg(), tiny_federation, tiny_task)
    assert not torch.equal(ditto.final_params, fedavg.final_params)
    assert torch.allclose(ditto.final_params, fedavg.final_params, atol=0.05)


def test_large_lambda_pins_personal_models_to_the_global_model(tiny_federation, tiny_task):
    distance = {}
    for lam in (0.0, 10.0):
        sim, result = run(Ditto(lam=lam), tiny_federation, tiny_task)
        # personal models after round 2 vs the global model they were regularised toward
        distance[lam] = max(float((c.state["personal"] - result.final_params).norm())
                            for c in sim.clients.values())
    assert distance[10.0] < 0.5 * distance[0.0]


def test_negative_lambda_is_rejected():
    with pytest.raises(ConfigError, match="lambda"):
        Ditto(lam=-1.0)
