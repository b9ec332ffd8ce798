"""The on-device choice among candidate models (regionfed-plus, fedavg-ft)."""

import pytest
import torch
from helpers import QuadraticClient

from regionfed.algorithms.on_device import choose_on_validation


def test_a_client_picks_the_model_that_validates_best_on_its_own_split():
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"regional": torch.zeros(2), "global": torch.ones(2),
                  "personal": 2 * torch.ones(2)}
    client.score_ = [0.8, 0.5, 0.6]  # regional, global, personal: the personal is worse
    assert choose_on_validation(candidates, client) == "regional"
    client.score_ = [0.6, 0.5, 0.9]
    assert choose_on_validation(candidates, client) == "personal"
    client.score_ = [0.7, 0.7, 0.7]  # ties go to the regional model
    assert choose_on_validation(candidates, client) == "regional"
    client.score_ = [0.7, 0.7, 0.7]  # … or to the first of another order
    assert choose_on_validation(candidates, client,
                                order=("personal", "regional", "global")) == "personal"


def test_with_a_margin_a_challenger_must_beat_the_regional_model_by_standard_errors():
    """10 validation examples, regional score 0.6: one standard error is √(0.24/10) ≈ 0.155,
    so a personal model at 0.7 (one lucky example) does not displace it; one at 0.8 does,
    and of two challengers past the bar the better one wins."""
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"regional": torch.zeros(2), "global": torch.ones(2),
                  "personal": 2 * torch.ones(2)}
    client.score_ = [0.6, 0.5, 0.7]
    assert choose_on_validation(candidates, client, margin=1.0) == "regional"
    client.score_ = [0.6, 0.5, 0.7]
    assert choose_on_validation(candidates, client, margin=0.0) == "personal"
    client.score_ = [0.6, 0.5, 0.8]
    assert choose_on_validation(candidates, client, margin=1.0) == "personal"
    client.score_ = [0.6, 0.9, 0.8]
    assert choose_on_validation(candidates, client, margin=1.0) == "global"


def test_peers_share_the_default_without_a_margin_among_them():
    """peers=2: the better of the first two candidates is the default (no margin between
    them), and the others must beat *it* by the margin. 10 examples: at 0.8 one standard
    error is √(0.16/10) ≈ 0.126."""
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    candidates = {"refreshed": torch.zeros(2), "personal": torch.ones(2),
                  "regional": 2 * torch.ones(2)}
    client.score_ = [0.7, 0.8, 0.6]  # the personal model edges the refreshed one
    assert choose_on_validation(candidates, client, margin=1.0) == "refreshed"
    client.score_ = [0.7, 0.8, 0.6]
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "personal"
    client.score_ = [0.8, 0.8, 0.6]  # ties among peers: the order
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "refreshed"
    client.score_ = [0.7, 0.8, 0.9]  # the regional model is within the margin of the default
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "personal"
    client.score_ = [0.7, 0.8, 0.95]
    assert choose_on_validation(candidates, client, margin=1.0, peers=2) == "regional"
    with pytest.raises(ValueError, match="peers"):
        choose_on_validation(candidates, client, peers=0)
