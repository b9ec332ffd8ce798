"""fedavg-ft: FedAvg's training, each client evaluated with the global model fine-tuned on
its own data (unless the global model validates better by the margin)."""

import pytest
import torch
from helpers import run_rounds, two_region_quadratics

from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.fedavg_ft import FedAvgFT
from regionfed.config import build_config
from regionfed.errors import ConfigError


def test_training_is_fedavgs_and_a_client_is_evaluated_with_its_fine_tuned_model():
    """Quadratic client (target t, one step of lr 0.5 an epoch): 3 epochs from θ land at
    θ + (1 − 0.5³)(t − θ); nothing of it is kept on the client."""
    clients, view = two_region_quadratics()
    plain, tuned = FedAvg(server_lr=1.0), FedAvgFT(finetune_epochs=3, server_lr=1.0)
    run_rounds(plain, clients, view, rounds=2)
    run_rounds(tuned, clients, view, rounds=2)
    assert torch.equal(plain.params, tuned.params)
    client = clients["a/1"]
    theta = tuned.params
    want = theta + (1 - 0.5 ** 3) * (client.target - theta)
    client.score_ = [0.5, 0.4]  # fine-tuned, global
    assert torch.allclose(tuned.eval_params("a/1", "a", client), want)
    assert "finetuned" not in client.state and client.state == {}
    assert tuned.evaluation_diagnostics()["choices"]["a"] == {"finetuned": 1, "global": 0}
    assert torch.equal(tuned.eval_params("a/1", "a", None), theta)  # the server's view


def test_the_global_model_must_beat_the_fine_tuned_one_by_the_margin():
    """30 validation examples, fine-tuned at 0.5: one standard error ≈ 0.091, margin 0.5."""
    clients, view = two_region_quadratics()
    strategy = FedAvgFT(finetune_epochs=1, choice_margin=0.5, server_lr=1.0)
    run_rounds(strategy, clients, view, rounds=1)
    client = clients["a/1"]
    client.score_ = [0.5, 0.54]  # ahead by less than the margin: the fine-tuned model
    assert not torch.equal(strategy.eval_params("a/1", "a", client), strategy.params)
    client.score_ = [0.5, 0.6]  # ahead by more: the global model
    assert torch.equal(strategy.eval_params("a/1", "a", client), strategy.params)
    assert strategy.evaluation_diagnostics()["choices"]["a"] == {"finetuned": 0, "global": 1}


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="finetune_epochs"):
        FedAvgFT(finetune_epochs=0)
    with pytest.raises(ConfigError, match="choice_margin"):
        FedAvgFT(choice_margin=-1.0)
    with pytest.raises(ConfigError, match="fedavg_ft_epochs"):
        build_config({"baselines": {"fedavg_ft_epochs": 0}})
