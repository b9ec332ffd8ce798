import pytest
import torch
from helpers import QuadraticClient, run_rounds

from regionfed.algorithms.apfl import APFL
from regionfed.algorithms.base import FederationView
from regionfed.algorithms.fedavg import FedAvg
from regionfed.config import TrainingConfig
from regionfed.errors import ConfigError
from regionfed.runtime.simulator import Simulator

SEQUENTIAL = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2,
                            client_batching="off")


def test_alpha_zero_is_the_fedavg_global_model(tiny_federation, tiny_task):
    fedavg = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0).run(FedAvg())
    simulator = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0)
    apfl = APFL(alpha=0.0, adaptive=False)
    run = simulator.run(apfl)
    assert torch.equal(fedavg.final_params, run.final_params)
    for cid, client in simulator.clients.items():
        assert torch.equal(apfl.eval_params(cid, client.region, client), run.final_params)
    assert run.test["overall"] == fedavg.test["overall"]


def test_personal_model_is_the_alpha_mixture(tiny_federation, tiny_task):
    simulator = Simulator(tiny_federation, tiny_task, SEQUENTIAL, seed=0)
    apfl = APFL(alpha=0.5, adaptive=False)
    run = simulator.run(apfl)
    client = next(iter(simulator.clients.values()))
    v = client.state["v"]
    assert not torch.equal(v, run.final_params)
    assert torch.allclose(apfl.eval_params(client.client_id, client.region, client),
                          0.5 * v + 0.5 * run.final_params)


def test_adaptive_alpha_grows_for_the_client_the_global_model_serves_badly():
    """Three big clients share an optimum (so the global model sits there), one small client
    is far away: the outlier leans on its own model (α → 1), the others on the global one
    (α → 0, the global model already sits at their optimum)."""
    targets = {"a/0": [1.0, 1.0], "a/1": [1.0, 1.0], "a/2": [1.0, 1.0], "a/3": [-3.0, 4.0]}
    sizes = {"a/0": 100, "a/1": 100, "a/2": 100, "a/3": 1}
    clients = {c: QuadraticClient(c, "a", sizes[c], torch.tensor(t), lr=0.2, steps=3)
               for c, t in targets.items()}
    view = FederationView(("a",), {c: "a" for c in clients}, sizes)
    apfl = APFL(alpha=0.25, adaptive=True)
    run_rounds(apfl, clients, view, rounds=20)
    alphas = {c: clients[c].state["alpha"] for c in clients}
    assert alphas["a/3"] > 0.9
    assert all(alphas[c] < 0.1 for c in ("a/0", "a/1", "a/2"))
    # the outlier's personal model is much closer to its optimum than the global model
    personal = apfl.eval_params("a/3", "a", clients["a/3"])
    target = clients["a/3"].target
    assert (personal - target).norm() < 0.3 * (apfl.params - target).norm()


@pytest.mark.parametrize("kwargs,match", [({"alpha": 1.5}, "alpha"),
                                          ({"alpha": -0.1}, "alpha"),
                                          ({"alpha_lr": 0.0}, "alpha_lr")])
def test_bad_hyper_parameters_are_rejected(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        APFL(**kwargs)
