import numpy as np
import pytest
import torch
from helpers import QuadraticClient, run_rounds

from regionfed.algorithms.base import EVALUATE, FederationView
from regionfed.algorithms.regionfed import RegionFed, RegionFedAvg, RegionFedConfig
from regionfed.algorithms.regionfed.conflict import ConflictCalibration, adaptive_alpha
from regionfed.privacy.mechanism import DPConfig

SHIFTED = "d"


def shifted_federation(val_shift: float = 0.0):
    """Regions a, b, c agree (targets near (1, 1)); region d's labels are shifted."""
    rng = np.random.default_rng(0)
    centres = {"a": (1.0, 1.0), "b": (1.2, 0.9), "c": (0.9, 1.1), SHIFTED: (-3.0, 5.0)}
    clients = {}
    for region, centre in centres.items():
        for k in range(3):
            target = torch.tensor(centre) + 0.05 * torch.tensor(rng.normal(size=2))
            clients[f"{region}/{k}"] = QuadraticClient(
                f"{region}/{k}", region, 10, target.float(),
                val_target=target.float() + val_shift)
    view = FederationView(tuple(centres), {c: c[0] for c in clients},
                          dict.fromkeys(clients, 10))
    return clients, view


def test_alpha_formula():
    assert adaptive_alpha(1.0, mu=1.0, tau=1.0, alpha_min=0.5) == pytest.approx(0.75)
    assert adaptive_alpha(100.0, mu=1.0, tau=1.0, alpha_min=0.5) == pytest.approx(1.0)
    assert adaptive_alpha(-100.0, mu=1.0, tau=1.0, alpha_min=0.5) == pytest.approx(0.5)
    calibration = ConflictCalibration(tau="auto")
    calibration.calibrate({"a": 1.0, "b": 2.0, "c": 4.0})
    assert calibration.mu == 2.0 and calibration.tau == 1.0  # median, median |d − median|
    same = ConflictCalibration(tau="auto")
    same.calibrate({"a": 1.0, "b": 1.0})
    assert same.tau > 0  # a zero MAD never divides by zero


@pytest.mark.parametrize("tau", [1.0, "auto"])
def test_shifted_region_has_the_largest_conflict_and_alpha(tau):
    clients, view = shifted_federation()
    strategy = RegionFed("grad", RegionFedConfig(tau=tau))
    logs = run_rounds(strategy, clients, view, rounds=3)
    for log in logs:
        conflict, alpha = log["conflict"], log["alpha"]
        assert max(conflict, key=conflict.get) == SHIFTED
        assert max(alpha, key=alpha.get) == SHIFTED
        assert all(0.5 <= a <= 1.0 for a in alpha.values())
        assert alpha[SHIFTED] > max(a for r, a in alpha.items() if r != SHIFTED)


@pytest.mark.parametrize("variant", ["grad", "interp", "meta"])
def test_chosen_rho_lowers_every_regional_validation_loss(variant):
    """The sign convention check: a positive ρ must move each region toward its own data."""
    clients, view = shifted_federation()
    strategy = RegionFed(variant)
    logs = run_rounds(strategy, clients, view, rounds=2)
    for log in logs:
        for region in view.regions:
            assert log["rho"][region] > 0.0
            assert log["val_loss_rho"][region] < log["val_loss_rho0"][region]
            assert log["rho_evaluations"][region] <= 15
    # the regional model is θ + α_r θ_r and fits its region better than the global model
    for region in view.regions:
        mine = [c for c in clients.values() if c.region == region]
        regional = strategy.eval_params(mine[0].client_id, region, mine[0])
        assert torch.allclose(regional, strategy.params + strategy.alpha[region]
                              * strategy.adaptation[region])
        loss = sum(c.validation_loss(regional)[0] for c in mine)
        global_loss = sum(c.validation_loss(strategy.params)[0] for c in mine)
        assert loss < global_loss


def test_global_model_is_the_mean_of_regional_means():
    clients, view = shifted_federation()
    strategy = RegionFed("grad", RegionFedConfig(rho_search=False))
    run_rounds(strategy, clients, view, rounds=1)
    regional = {r: torch.stack([0.5 * c.target for c in clients.values() if c.region == r]
                               ).mean(0) for r in view.regions}
    expected = torch.stack(list(regional.values())).mean(0)  # p_r = 1/M, one step of lr 0.5
    assert torch.allclose(strategy.params, expected, atol=1e-6)


def test_region_fedavg_uses_fixed_alpha_and_rho_and_no_search():
    clients, view = shifted_federation()
    strategy = RegionFedAvg()
    sent = []
    original = strategy.handle
    strategy.handle = lambda i, c: sent.append(i.kind) or original(i, c)
    logs = run_rounds(strategy, clients, view, rounds=2)
    assert EVALUATE not in sent
    assert set(logs[-1]["alpha"].values()) == {0.75} and set(logs[-1]["rho"].values()) == {1.0}
    assert strategy.name == "region-fedavg" and strategy.releases_per_round == 1


def test_privacy_releases_per_round():
    assert RegionFed("grad").releases_per_round == 1
    assert RegionFed("meta").releases_per_round == 2
    assert RegionFed("interp").releases_per_round == 2


def test_user_level_dp_noise_reaches_the_conflicts_but_stays_bounded():
    clients, view = shifted_federation()
    noisy = RegionFed("grad", RegionFedConfig(rho_search=False),
                      dp=DPConfig(mode="user", sigma=1.0, clip=10.0))
    logs = run_rounds(noisy, clients, view, rounds=1, seed=3)
    clean = RegionFed("grad", RegionFedConfig(rho_search=False),
                      dp=DPConfig(mode="user", sigma=0.0, clip=10.0))
    clean_logs = run_rounds(clean, clients, view, rounds=1, seed=3)
    assert logs[0]["conflict"] != clean_logs[0]["conflict"]
    # noise std per coordinate on a regional mean: σC/(q·n_r) = 10/3
    assert max(abs(logs[0]["conflict"][r] - clean_logs[0]["conflict"][r])
               for r in view.regions) < 5 * 10 / 3 * 2


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown RegionFed strategy"):
        RegionFed("magic")
