import pytest
import torch

from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.fedprox import FedProx, proximal_term
from regionfed.config import TrainingConfig
from regionfed.errors import ConfigError
from regionfed.runtime.params import get_flat, set_flat
from regionfed.runtime.simulator import Simulator

SEQUENTIAL = TrainingConfig(rounds=2, local_epochs=2, batch_size=32, eval_every=2,
                            client_batching="off")


def test_mu_zero_is_fedavg_exactly(tiny_federation, tiny_task):
    fedavg = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0).run(FedAvg())
    prox = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0).run(FedProx(mu=0.0))
    assert torch.equal(fedavg.final_params, prox.final_params)


def test_proximal_term_keeps_clients_near_the_global_model(tiny_federation, tiny_task):
    norms = {}
    for mu in (0.0, 1.0):
        run = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0).run(FedProx(mu=mu))
        norms[mu] = run.history[0]["update_norm"]
        assert run.history[0]["client_batching"].startswith(
            "sequential" if mu else "sequential (client_batching off)")
    assert norms[1.0] < 0.8 * norms[0.0]


def test_proximal_term_value_and_gradient(tiny_task):
    model = tiny_task.build_model(0)
    anchor = get_flat(model)
    set_flat(model, anchor + 0.5)
    value = proximal_term(anchor, mu=2.0)(model)
    assert float(value.detach()) == pytest.approx(0.5 * 2.0 * 0.25 * anchor.numel(), rel=1e-5)
    value.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.allclose(grads, torch.full_like(grads, 2.0 * 0.5))  # μ(θ − anchor)


def test_negative_mu_is_rejected():
    with pytest.raises(ConfigError, match="mu"):
        FedProx(mu=-0.1)
