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


def test_brent_line_search_finds_golden_sections_rho_in_fewer_evaluations():
    """Round 1 of the same federation (the rounds after depend on the ρ chosen): Brent's
    method and Alg. 3's golden section minimise the same validation loss to the same
    tolerance, so they pick ρ within it of each other — Brent with fewer evaluations."""
    logs = {}
    for method in ("brent", "golden"):
        clients, view = shifted_federation()
        strategy = RegionFed("grad", RegionFedConfig(line_search=method))
        logs[method] = run_rounds(strategy, clients, view, rounds=1)[0]
    for region in view.regions:
        # (one region's minimum is the interval's end ρ = 2, where the loss is steep: both
        # stop within the tolerance 0.01 of it, at 1.994 and 1.996, 0.6 % apart in loss)
        assert logs["brent"]["rho"][region] == pytest.approx(logs["golden"]["rho"][region],
                                                             abs=0.01)
        assert logs["brent"]["val_loss_rho"][region] == pytest.approx(
            logs["golden"]["val_loss_rho"][region], rel=0.01)
        assert logs["golden"]["rho_evaluations"][region] == 14
        assert logs["brent"]["rho_evaluations"][region] < 14


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
    strategy.handle = lambda i, c: sent.append((i.kind, bool(i.config))) or original(i, c)
    logs = run_rounds(strategy, clients, view, rounds=2)
    assert (EVALUATE, False) not in sent  # no ρ search: only the accuracy log evaluates
    assert (EVALUATE, True) in sent
    assert set(logs[-1]["alpha"].values()) == {0.75} and set(logs[-1]["rho"].values()) == {1.0}
    assert strategy.name == "region-fedavg"


@pytest.mark.parametrize(("variant", "per_region"), [("grad", 1), ("meta", 2), ("interp", 2)])
def test_each_region_records_its_own_releases(variant, per_region):
    """The mechanism records what it noised: one g̃_r per region, plus the second regional
    aggregate of meta/interp, each over that region's users only (fixed ρ: no selection)."""
    clients, view = shifted_federation()
    strategy = RegionFed(variant, RegionFedConfig(rho_search=False),
                         dp=DPConfig(mode="user", sigma=1.0, clip=10.0))
    run_rounds(strategy, clients, view, rounds=1)
    events = strategy.releases.drain()
    assert len(events) == per_region * len(view.regions)
    for region in view.regions:
        mine = [e for e in events if e.regions == (region,)]
        assert len(mine) == per_region
        assert all(e.noise_multiplier == 1.0 and e.vectors == 1 for e in mine)


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


def test_dynamic_router_follows_algorithm_1():
    from regionfed.algorithms.regionfed.routing import route
    assert route(0.9, 1.5, 100, 100) == "meta"  # severe drift and heterogeneity
    assert route(0.9, 0.5, 100, 100) == "grad"  # drift but homogeneous, average size
    assert route(0.1, 2.0, 200, 100) == "interp"  # data-rich (200 > 1.5 · 100)
    assert route(0.9, 0.5, 200, 100) == "interp"
    assert route(0.1, 0.1, 100, 100) == "grad"
    assert route(0.6, 1.2, 100, 100, tau_conflict=0.7) == "grad"


def test_fallback_fires_on_a_drop_and_on_a_stall():
    from regionfed.algorithms.regionfed.routing import ValidationFallback
    fb = ValidationFallback(drop=0.05, patience=2)
    fb.record({"a": 0.80, "b": 0.80})
    fb.record({"a": 0.74, "b": 0.78})  # a dropped 6 points, b only 2
    assert fb.forced_to_grad("a") and not fb.forced_to_grad("b")
    fb.record({"a": 0.85, "b": 0.79})
    assert not fb.forced_to_grad("a")  # recovered beyond its earlier best
    assert fb.forced_to_grad("b")  # no improvement over 0.80 for 2 rounds
    fb.record({"a": 0.86, "b": 0.81})
    assert not fb.forced_to_grad("a") and not fb.forced_to_grad("b")


def test_dynamic_routes_regions_and_records_the_ldp_report():
    clients, view = shifted_federation()
    rng = np.random.default_rng(1)
    for c in clients.values():  # region d's clients see other intents than everyone else
        c.labels_ = rng.integers(4, 8, 10) if c.region == SHIFTED else rng.integers(0, 4, 10)
    strategy = RegionFed("dynamic", RegionFedConfig(tau_conflict=0.0, tau_het=0.5,
                                                    ldp_epsilon=8.0))
    logs = run_rounds(strategy, clients, view, rounds=2)
    assert logs[0]["heterogeneity"][SHIFTED] > max(
        h for r, h in logs[0]["heterogeneity"].items() if r != SHIFTED)
    assert logs[0]["strategy"][SHIFTED] == "meta"
    assert all(s == "grad" for r, s in logs[0]["strategy"].items() if r != SHIFTED)
    assert len(strategy.ldp_reports) == 1  # histograms are collected once
    # each of a user's 10 labels is randomized on its own: 10 items per user
    assert strategy.ldp_reports[0][0] == 8.0 and strategy.ldp_reports[0][2] == 10
    assert "val_accuracy" in logs[1]


def test_dynamic_falls_back_to_grad_after_a_validation_drop():
    clients, view = shifted_federation()
    for c in clients.values():
        c.labels_ = np.full(10, 7 if c.region == SHIFTED else 0)
        c.score_ = [0.9, 0.5, 0.5, 0.5]  # the regional validation score collapses in round 2
    strategy = RegionFed("dynamic", RegionFedConfig(tau_conflict=0.0, tau_het=0.1))
    logs = run_rounds(strategy, clients, view, rounds=3)
    assert logs[0]["strategy"][SHIFTED] == "meta"
    assert logs[2]["strategy"][SHIFTED] == "grad"  # forced by the 40-point drop


def test_user_personalization_lowers_each_users_own_loss():
    from regionfed.algorithms.regionfed.personalization import personalize_region
    clients, view = shifted_federation()
    strategy = RegionFed("grad")
    run_rounds(strategy, clients, view, rounds=3)
    for region in view.regions:
        users = {c.client_id: c for c in clients.values() if c.region == region}
        regional = strategy.regional_params(region)
        personal, alpha = personalize_region(users, regional, strategy.last_regional[region],
                                             alpha_min=0.5, tau="auto")
        assert all(0.5 <= a <= 1.0 for a in alpha.values())
        for uid, user in users.items():
            assert user.validation_loss(personal[uid])[0] < user.validation_loss(regional)[0]
            assert torch.allclose(personal[uid], regional + alpha[uid] * (
                user.train(regional)[0] - regional))


def test_private_user_personalization_shares_nothing_between_users():
    """Under DP, α_u is centred on ‖g̃_r‖ (released), not on the other users' conflicts:
    moving one user's data leaves every other user's α unchanged (it moves the median)."""
    import copy

    from regionfed.algorithms.regionfed.personalization import personalize_region
    clients, view = shifted_federation()
    strategy = RegionFed("grad")
    run_rounds(strategy, clients, view, rounds=2)
    users = {c.client_id: c for c in clients.values() if c.region == SHIFTED}
    moved = copy.deepcopy(users)
    victim = next(iter(moved))
    moved[victim].target = moved[victim].target * 50
    regional, reference = strategy.regional_params(SHIFTED), strategy.last_regional[SHIFTED]
    for private, unchanged in ((True, True), (False, False)):
        _, before = personalize_region(users, regional, reference, tau="auto", private=private)
        _, after = personalize_region(moved, regional, reference, tau="auto", private=private)
        others = [u for u in users if u != victim]
        assert all(before[u] == after[u] for u in others) is unchanged


def test_persistent_adaptation_accumulates_and_never_hurts_validation():
    from regionfed.algorithms.regionfed import RegionFedPersist
    clients, view = shifted_federation()
    strategy = RegionFedPersist()
    logs = run_rounds(strategy, clients, view, rounds=4)
    # ρ = 0 keeps last round's θ_r, so the searched loss never gets worse than keeping it
    for log in logs:
        for region in view.regions:
            assert log["val_loss_rho"][region] <= log["val_loss_rho0"][region]
    one_step = RegionFed("grad")
    run_rounds(one_step, clients, view, rounds=4)
    persist_loss = sum(c.validation_loss(strategy.regional_params(c.region))[0]
                       for c in clients.values())
    one_step_loss = sum(c.validation_loss(one_step.regional_params(c.region))[0]
                        for c in clients.values())
    assert persist_loss < one_step_loss


def test_ensemble_weights_follow_each_strategys_validation_accuracy():
    from regionfed.algorithms.base import Ensemble
    clients, view = shifted_federation()
    for c in clients.values():  # scripted regional validation scores: grad, interp, meta
        c.score_ = [0.9, 0.3, 0.6] if c.region == SHIFTED else [0.5, 0.5, 0.5]
    strategy = RegionFed("ensemble")
    logs = run_rounds(strategy, clients, view, rounds=1)
    weights = strategy.member_weights[SHIFTED]
    assert weights == pytest.approx({"grad": 0.5, "interp": 1 / 6, "meta": 1 / 3})
    assert strategy.member_weights["a"] == pytest.approx(dict.fromkeys(weights, 1 / 3))
    assert set(logs[0]["rho"]) == {"grad", "interp", "meta"}
    model = strategy.eval_params("d/0", SHIFTED, clients["d/0"])
    assert isinstance(model, Ensemble) and len(model.members) == 3
    # every member is a regional model θ + α_r θ_r^s, and meta ≠ grad (different directions)
    alpha = strategy.alpha[SHIFTED]
    members = strategy.members[SHIFTED]
    assert torch.allclose(model.members[0], strategy.params + alpha * members["grad"])
    assert not torch.allclose(members["grad"], members["meta"])
    # the single regional model (user stage) is the best-weighted member
    assert torch.allclose(strategy.regional_params(SHIFTED), model.members[0])


def test_the_user_level_stage_is_the_strategys_hook_and_can_be_switched_off():
    from regionfed.algorithms.fedavg import FedAvg
    from regionfed.algorithms.regionfed import RegionFed, RegionFedConfig

    assert FedAvg().personalize_users("r", {}) is None  # no stage by default
    off = RegionFed("grad", RegionFedConfig(user_personalization=False))
    assert off.personalize_users("r", {}) is None

