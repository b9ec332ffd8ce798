"""Client faults (issue 9): dropouts and stragglers, rejected replies, and an adversarial
client whose huge update clipping bounds."""

import numpy as np
import pytest
import torch

from regionfed.algorithms.base import ClientResult
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.registry import METHODS, build_strategy
from regionfed.config import TrainingConfig, build_config
from regionfed.errors import ConfigError
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.privacy.mechanism import DPConfig
from regionfed.runtime.faults import rejection_reason, round_faults
from regionfed.runtime.simulator import Simulator

FAST = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2)


def test_faults_are_drawn_per_round_at_the_configured_rates():
    clients = [f"c{i}" for i in range(4000)]
    faults = round_faults(clients, 0.2, 0.1, seed=3, rnd=5)
    assert faults == round_faults(clients, 0.2, 0.1, seed=3, rnd=5)  # resumable
    assert faults != round_faults(clients, 0.2, 0.1, seed=3, rnd=6)
    assert not faults.dropped & faults.late
    assert len(faults.dropped) / 4000 == pytest.approx(0.2, abs=0.025)
    assert len(faults.late) / 4000 == pytest.approx(0.1, abs=0.02)
    assert round_faults(clients, 0.0, 0.0, 3, 5).dropped == frozenset()


def test_replies_that_must_not_be_aggregated_are_named():
    ok = ClientResult("a", "r", torch.ones(4), 1, {"train_loss": 0.5})
    assert rejection_reason(ok, 4) is None
    assert "shape (3,)" in rejection_reason(ClientResult("a", "r", torch.ones(3), 1), 4)
    inf = torch.ones(4)
    inf[2] = float("inf")
    assert "NaN/Inf" in rejection_reason(ClientResult("a", "r", inf, 1), 4)
    assert "train_loss" in rejection_reason(
        ClientResult("a", "r", torch.ones(4), 1, {"train_loss": float("nan")}), 4)


@pytest.mark.parametrize("method", [m for m, s in METHODS.items() if s.kind == "federated"])
def test_every_method_trains_through_dropouts_and_stragglers(method, tiny_federation,
                                                             tiny_task):
    config = build_config({"training": {**FAST.model_dump(), "dropout": 0.3,
                                        "stragglers": 0.2},
                           "regionfed": {"rho_tolerance": 0.2}})
    run = Simulator(tiny_federation, tiny_task, config.training, seed=0).run(
        build_strategy(method, config))
    assert torch.isfinite(run.final_params).all()
    assert 0.0 <= run.test["overall"] <= 1.0
    faults = [h["faults"] for h in run.history if "faults" in h]
    assert faults and sum(f["dropped"] + f["late"] for f in faults) > 0


class ShapeShifter(FedAvg):
    """Client 0 replies with a truncated update."""

    def client_train(self, instruction, client):
        result = super().client_train(instruction, client)
        if client.index == 0:
            result.update = result.update[:-1]
        return result


def test_a_malformed_update_is_rejected_and_the_round_goes_on(tiny_federation, tiny_task):
    run = Simulator(tiny_federation, tiny_task, FAST, seed=0).run(ShapeShifter())
    first = tiny_federation.clients[0].client_id
    for entry in run.history:
        assert list(entry["faults"]["rejected"]) == [first]
        assert entry["clients"] == len(tiny_federation.clients) - 1


class Adversary(FedAvg):
    """Client 0 sends its update scaled by 10⁶; records every global step."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.steps = []

    def client_train(self, instruction, client):
        result = super().client_train(instruction, client)
        if client.index == 0:
            result.update = result.update * 1e6
        return result

    def aggregate_train(self, rnd, results):
        before = self.params.clone()
        log = super().aggregate_train(rnd, results)
        self.steps.append(float((self.params - before).norm()))
        return log


def test_clipping_bounds_an_adversarial_clients_influence(tiny_federation, tiny_task):
    clip = 0.5
    bounded = Adversary(dp=DPConfig(mode="user", sigma=0.0, clip=clip))
    Simulator(tiny_federation, tiny_task, FAST, seed=0).run(bounded)
    # the mean of clipped updates over the q·n = n expected clients moves ≤ C
    assert max(bounded.steps) <= clip * (1 + 1e-5)
    unbounded = Adversary()
    Simulator(tiny_federation, tiny_task, FAST, seed=0).run(unbounded)
    assert max(unbounded.steps) > 1e3  # without clipping it would dominate


def test_the_dp_denominator_counts_only_the_clients_expected_to_report():
    strategy = FedAvg(dp=DPConfig(mode="user", sigma=0.0, clip=10.0))
    strategy.params = torch.zeros(3)
    results = [ClientResult(f"c{i}", "r", torch.ones(3), 1) for i in range(4)]
    assert torch.allclose(strategy.private_mean(results, 8.0), torch.full((3,), 0.5))
    strategy.report_rate = 0.5  # half of the sampled clients are expected to report
    assert torch.allclose(strategy.private_mean(results, 8.0), torch.ones(3))


def test_faults_leave_the_privacy_ledger_unchanged(tiny_federation, tiny_task):
    """ε is accounted with the sampling rate q (no amplification claimed for faults)."""
    epsilons = []
    for dropout in (0.0, 0.4):
        config = build_config({"training": {**FAST.model_dump(), "dropout": dropout,
                                            "sample_rate": 0.5},
                               "dp": {"mode": "user", "sigma": 1.0}})
        ledger = PrivacyLedger(config.dp, config.training.sample_rate)
        Simulator(tiny_federation, tiny_task, config.training, seed=0).run(
            build_strategy("fedavg", config), ledger=ledger)
        epsilons.append(ledger.epsilon())
    assert np.isfinite(epsilons[0]) and epsilons[0] == epsilons[1]


@pytest.mark.parametrize("training, message", [
    ({"dropout": 1.0}, "training.dropout"),
    ({"stragglers": -0.1}, "training.stragglers"),
    ({"dropout": 0.6, "stragglers": 0.5}, "someone has to report"),
])
def test_fault_rates_are_validated(training, message):
    with pytest.raises(ConfigError, match=message):
        build_config({"training": training})
    with pytest.raises(ConfigError, match="in-process runtime only"):
        build_config({"training": {"dropout": 0.1}, "runtime": "flower-sim"})
