"""FedBABU and FedRep: only the body is federated; the head is the model's declaration."""

import numpy as np
import pytest
import torch
from helpers import QuadraticClient, run_rounds

from regionfed.algorithms.base import FederationView, ParameterBlock
from regionfed.algorithms.fedbabu import FedBABU
from regionfed.algorithms.fedrep import FedRep
from regionfed.config import TrainingConfig
from regionfed.errors import ConfigError, MethodNotApplicableError
from regionfed.privacy.mechanism import DPConfig
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import Simulator

TRAINING = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2)


def body_head_quadratics():
    """θ = (body, head): clients agree on nothing; the head coordinate is personal."""
    targets = {"a/0": [1.0, 5.0], "a/1": [3.0, -5.0], "b/0": [2.0, 1.0]}
    clients = {c: QuadraticClient(c, c[0], 10, torch.tensor(t), lr=0.5, steps=4)
               for c, t in targets.items()}
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, {c: 10 for c in clients},
                          {"head": (ParameterBlock("head", 1, (1,)),)})
    return clients, view


def test_fedrep_learns_the_shared_body_and_each_clients_own_head():
    clients, view = body_head_quadratics()
    strategy = FedRep(head_epochs=2)
    run_rounds(strategy, clients, view, rounds=30)
    assert strategy.params[0] == pytest.approx(2.0, abs=1e-3)  # mean of the body targets
    assert strategy.params[1] == 0.0  # the server's head never moves
    for cid, client in clients.items():
        personal = strategy.eval_params(cid, client.region, client)
        assert torch.allclose(personal, torch.tensor([2.0, float(client.target[1])]),
                              atol=1e-2)


def test_fedbabu_freezes_the_head_in_rounds_and_fine_tunes_it_afterwards():
    clients, view = body_head_quadratics()
    strategy = FedBABU(finetune_epochs=1)
    run_rounds(strategy, clients, view, rounds=30)
    # federated training: the head stays at its initial value, the body learns the mean
    assert strategy.params[1] == 0.0
    assert strategy.params[0] == pytest.approx(2.0, abs=1e-3)
    for cid, client in clients.items():
        tuned = strategy.eval_params(cid, client.region, client)
        start_error = (strategy.params - client.target).norm()
        assert (tuned - client.target).norm() < 0.1 * start_error  # 4 steps of lr 0.5


def test_fedbabu_head_is_bit_identical_during_real_rounds_even_with_dp(tiny_federation,
                                                                       tiny_task):
    init = get_flat(tiny_task.build_model(0))
    dp = DPConfig(mode="user", sigma=1.0, clip=1.0)
    strategy = FedBABU(finetune_epochs=1, dp=dp)
    batched = TRAINING.model_copy(update={"client_batching": "on"})
    run = Simulator(tiny_federation, tiny_task, batched, seed=0).run(strategy)
    head = strategy.head
    assert head.any() and not head.all()
    assert torch.equal(run.final_params[head], init[head])
    assert not torch.equal(run.final_params[~head], init[~head])
    assert run.history[0]["client_batching"] == "batched"  # the mask batches too
    # evaluation used the fine-tuned models: they differ from the global one in the head
    client = tiny_federation.clients[0]
    sim_client = Simulator(tiny_federation, tiny_task, TRAINING, seed=0).clients[
        client.client_id]
    tuned = strategy.eval_params(client.client_id, client.region, sim_client)
    assert not torch.equal(tuned[head], init[head])


def test_fedbabu_fine_tunes_to_the_same_model_however_often_a_client_is_evaluated(
        tiny_federation, tiny_task):
    """Flower evaluates validation and test in separate message rounds, on a node that may
    not keep the cached model: the fine-tuning must not depend on how often it ran."""
    strategy = FedBABU(finetune_epochs=1)
    strategy.params = get_flat(tiny_task.build_model(0))
    client = tiny_federation.clients[0]
    sim_client = Simulator(tiny_federation, tiny_task, TRAINING, seed=0).clients[
        client.client_id]
    first = strategy.eval_params(client.client_id, client.region, sim_client)
    sim_client.state.clear()  # a node that did not keep it
    again = strategy.eval_params(client.client_id, client.region, sim_client)
    assert not torch.equal(first, strategy.params)
    assert torch.equal(first, again)


def test_fedrep_keeps_the_server_head_and_personal_heads_on_devices(tiny_federation,
                                                                    tiny_task):
    init = get_flat(tiny_task.build_model(0))
    strategy = FedRep(head_epochs=1)
    simulator = Simulator(tiny_federation, tiny_task, TRAINING, seed=0)
    run = simulator.run(strategy)
    head = strategy.head
    assert torch.equal(run.final_params[head], init[head])
    personal = [strategy.eval_params(c, simulator.clients[c].region, simulator.clients[c])
                for c in list(simulator.clients)[:2]]
    assert not torch.equal(personal[0][head], personal[1][head])
    assert torch.equal(personal[0][~head], run.final_params[~head])
    assert np.isfinite(run.test["overall"])


def test_a_model_without_a_declared_head_is_not_applicable(two_region_clients):
    clients, view = two_region_clients
    for strategy in (FedBABU(), FedRep()):
        with pytest.raises(MethodNotApplicableError, match="head"):
            run_rounds(strategy, clients, view, rounds=1)


def test_bad_hyper_parameters_are_rejected():
    with pytest.raises(ConfigError, match="finetune_epochs"):
        FedBABU(finetune_epochs=-1)
    with pytest.raises(ConfigError, match="head_epochs"):
        FedRep(head_epochs=0)
