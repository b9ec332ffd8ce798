"""Accounting (SPEC §3 step 3, §4): ε from dp-accounting, its inverse, and the ledger."""

import math

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from regionfed.errors import ConfigError
from regionfed.privacy import (
    PLD_VALUE_DISCRETIZATION,
    DPConfig,
    PrivacyLedger,
    epsilon_pld,
    epsilon_rdp,
    rounds_within_budget,
    sigma_for_epsilon,
)
from regionfed.privacy.ledger import DETERMINISTIC_NOISE
from regionfed.privacy.releases import ReleaseEvent


def _direct(accountant, sigma, q, rounds, delta):
    """ε built here, straight from the library, independently of regionfed."""
    inner = dp_accounting.GaussianDpEvent(sigma)
    if q < 1:
        inner = dp_accounting.PoissonSampledDpEvent(q, inner)
    accountant.compose(dp_accounting.SelfComposedDpEvent(inner, rounds))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("sigma,q,rounds,delta",
                         [(4.0, 0.1, 50, 1e-5), (1.5, 0.05, 20, 1e-6), (2.0, 1.0, 10, 1e-5)])
def test_epsilon_matches_dp_accounting(sigma, q, rounds, delta):
    # PLD at the library's default (finer) discretization: ours must agree to 2e-3.
    want_pld = _direct(PLDAccountant(), sigma, q, rounds, delta)
    assert epsilon_pld(sigma, q, rounds, delta) == pytest.approx(want_pld, abs=2e-3)
    want_rdp = _direct(RdpAccountant(), sigma, q, rounds, delta)
    assert epsilon_rdp(sigma, q, rounds, delta) == pytest.approx(want_rdp, rel=1e-9)


def test_spec_known_values():
    # SPEC §3: σ=4, q=0.1, T=50, δ=1e-5 → RDP ≈ 0.758, PLD ≈ 0.684 (paper claims ≈ 0.60)
    assert epsilon_rdp(4.0, 0.1, 50, 1e-5) == pytest.approx(0.758, abs=0.01)
    assert epsilon_pld(4.0, 0.1, 50, 1e-5) == pytest.approx(0.684, abs=0.01)


def test_pld_tighter_than_rdp():
    assert epsilon_pld(4.0, 0.1, 50, 1e-5) < epsilon_rdp(4.0, 0.1, 50, 1e-5)


@pytest.mark.parametrize("fn", [epsilon_pld, epsilon_rdp])
def test_monotone_in_rounds_and_sigma(fn):
    by_rounds = [fn(3.0, 0.1, t, 1e-5) for t in (1, 5, 20, 50, 100)]
    assert all(a < b for a, b in zip(by_rounds, by_rounds[1:], strict=False))
    by_sigma = [fn(s, 0.1, 50, 1e-5) for s in (0.8, 1.0, 2.0, 4.0, 8.0)]
    assert all(a > b for a, b in zip(by_sigma, by_sigma[1:], strict=False))


def test_special_cases_and_validation():
    assert epsilon_pld(0.0, 0.1, 50, 1e-5) == math.inf
    assert epsilon_rdp(0.0, 0.1, 50, 1e-5) == math.inf
    assert epsilon_pld(4.0, 0.1, 0, 1e-5) == 0.0
    for bad in [(-1.0, 0.1, 5, 1e-5), (1.0, 0.0, 5, 1e-5), (1.0, 1.5, 5, 1e-5),
                (1.0, 0.1, -1, 1e-5), (1.0, 0.1, 5, 0.0), (1.0, 0.1, 5, 1.0),
                (1.0, 0.1, 2.5, 1e-5)]:
        with pytest.raises(ConfigError):
            epsilon_pld(*bad)


@pytest.mark.parametrize("target", [0.5, 1.0, 4.0])
def test_sigma_for_epsilon_inverts(target):
    sigma = sigma_for_epsilon(target, 0.1, 50, 1e-5)
    eps = epsilon_pld(sigma, 0.1, 50, 1e-5)
    assert eps <= target
    assert eps == pytest.approx(target, rel=0.01)
    # smallest such σ: 1% less noise overshoots the target
    assert epsilon_pld(sigma * 0.99, 0.1, 50, 1e-5) > target


def test_sigma_for_epsilon_rdp_and_errors():
    sigma = sigma_for_epsilon(1.0, 0.1, 50, 1e-5, accountant="rdp")
    assert epsilon_rdp(sigma, 0.1, 50, 1e-5) == pytest.approx(1.0, rel=0.01)
    # RDP is looser, so it needs at least as much noise as PLD
    assert sigma >= sigma_for_epsilon(1.0, 0.1, 50, 1e-5)
    for bad in [(0.0, 0.1, 50, 1e-5), (-1.0, 0.1, 50, 1e-5), (1.0, 0.0, 50, 1e-5),
                (1.0, 0.1, 50, 2.0), (1.0, 0.1, 0, 1e-5)]:
        with pytest.raises(ConfigError):
            sigma_for_epsilon(*bad)


@pytest.mark.parametrize("target", [0.3, 0.7, 1.0])
def test_rounds_within_budget(target):
    t = rounds_within_budget(target, 4.0, 0.1, 1e-5, max_rounds=500)
    assert 0 < t < 500
    assert epsilon_pld(4.0, 0.1, t, 1e-5) <= target < epsilon_pld(4.0, 0.1, t + 1, 1e-5)


def test_rounds_within_budget_edges():
    assert rounds_within_budget(100.0, 4.0, 0.1, 1e-5, max_rounds=30) == 30
    assert rounds_within_budget(1.0, 0.0, 0.1, 1e-5, max_rounds=30) == 0
    assert rounds_within_budget(1e-9, 4.0, 0.1, 1e-5, max_rounds=30) == 0


def _gaussian(sigma=4.0, q=0.1, regions=("a", "b"), vectors=1, what="model update"):
    return ReleaseEvent(what, q, sigma, vectors, tuple(regions))


def test_ledger_record_user_mode():
    ledger = PrivacyLedger(DPConfig(mode="user", sigma=4.0, clip=1.0, delta=1e-5), 0.1)
    for _ in range(50):
        ledger.record_round([_gaussian()])
    ledger.record_ldp(2.0, "intent histogram", items_per_user=3)
    ledger.record_ldp(2.0, "intent histogram")
    rec = ledger.to_dict()
    assert rec["mode"] == "user" and rec["rounds"] == 50 and rec["sample_rate"] == 0.1
    assert rec["clip"] == 1.0 and rec["sigma"] == 4.0 and rec["delta"] == 1e-5
    assert rec["epsilon_pld"] == pytest.approx(epsilon_pld(4.0, 0.1, 50, 1e-5))
    assert rec["epsilon_rdp"] == pytest.approx(epsilon_rdp(4.0, 0.1, 50, 1e-5))
    assert rec["epsilon_infinite"] is False
    assert rec["events"] == [{"what": "model update", "event": "PoissonSampled(Gaussian)",
                              "sample_rate": 0.1, "noise_multiplier": 4.0, "vectors": 1,
                              "count": 50, "regions": 2}]
    assert rec["unaccounted"] == [] and rec["noise"] == "OS entropy"
    # a user reporting 3 labels then 1 label spends 4 · ε_LDP
    assert rec["ldp"] == [{"what": "intent histogram", "epsilon": 2.0, "releases": 4,
                           "epsilon_total": 8.0}]
    assert "one user's" in rec["protects"] and "parallel" in rec["protects"]
    # the --target-epsilon check
    assert ledger.would_exceed(rec["epsilon_pld"] + 1e-9, [_gaussian()])
    assert not ledger.would_exceed(10.0, [_gaussian()])


def test_ledger_off_and_sigma_zero_are_infinite():
    for cfg in (DPConfig(mode="off", sigma=4.0), DPConfig(mode="user", sigma=0.0)):
        ledger = PrivacyLedger(cfg, 1.0)
        ledger.record_round([_gaussian(sigma=0.0, q=1.0)])
        rec = ledger.to_dict()
        assert rec["epsilon_pld"] is None and rec["epsilon_rdp"] is None
        assert rec["epsilon_infinite"] is True
        assert rec["protects"].startswith("nothing")
        assert ledger.epsilon() == math.inf


def test_ledger_region_mode_has_no_sampling_amplification():
    ledger = PrivacyLedger(DPConfig(mode="region", sigma=4.0), 0.1)
    for _ in range(50):
        ledger.record_round([_gaussian(q=1.0)])
    rec = ledger.to_dict()
    assert "whole region" in rec["protects"]
    assert rec["accounting_sample_rate"] == 1.0
    assert rec["epsilon_pld"] == pytest.approx(epsilon_pld(4.0, 1.0, 50, 1e-5))
    assert rec["epsilon_pld"] > 5 * epsilon_pld(4.0, 0.1, 50, 1e-5)


def test_ledger_composes_per_region_in_parallel_and_mixed_events_with_dp_accounting():
    """Releases over disjoint regions compose in parallel (one region's users only see
    theirs); different events touching one region compose like dp-accounting's Composed."""
    ledger = PrivacyLedger(DPConfig(sigma=2.0), 0.2)
    for _ in range(3):  # each region releases its own update: parallel, not 2 × 3
        ledger.record_round([_gaussian(2.0, 0.2, ["a"]), _gaussian(2.0, 0.2, ["b"])])
    assert ledger.rounds == 3 and ledger.releases == 3
    assert ledger.epsilon() == pytest.approx(epsilon_pld(2.0, 0.2, 3, 1e-5))
    # region a also releases selection scores at σ = 3: a's users now bear both
    ledger.record_round([_gaussian(3.0, 0.2, ["a"], what="scores")])
    acc = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    acc.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            0.2, dp_accounting.GaussianDpEvent(2.0)), 3),
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            0.2, dp_accounting.GaussianDpEvent(3.0)), 1)]))
    assert ledger.epsilon() == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert ledger.releases == 4  # region a's users: 3 updates + 1 selection release
    with pytest.raises(ConfigError):
        PrivacyLedger(DPConfig(sigma=2.0), 0.0)
    with pytest.raises(ConfigError):
        ledger.record_ldp(0.0, "x")
    with pytest.raises(ConfigError):
        ledger.record_ldp(1.0, "x", items_per_user=0)


def test_deterministic_noise_and_unaccounted_choices_are_said_plainly():
    ledger = PrivacyLedger(DPConfig(sigma=2.0, noise_seed=3), 0.2)
    ledger.record_round([_gaussian(2.0, 0.2)])
    ledger.note_unaccounted("ρ search (un-noised validation data)")
    rec = ledger.to_dict()
    assert rec["noise"].startswith(DETERMINISTIC_NOISE)
    assert rec["protects"].startswith("nothing yet: deterministic noise — not private")
    assert rec["unaccounted"] == ["ρ search (un-noised validation data)"]
    assert "NOT covered: ρ search" in rec["protects"]


def test_rdp_at_small_sigma_is_quiet_and_still_matches_dp_accounting(caplog):
    """dp-accounting warns once per order it excludes at small σ; ε is unchanged and the
    warnings stay out of the user's terminal (the absl level is restored afterwards)."""
    import logging

    before = logging.getLogger("absl").level
    with caplog.at_level(logging.WARNING):
        ours = epsilon_rdp(0.5, 0.5, 7, 1e-5)
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]
    acc = RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(0.5)), 7))
    assert ours == pytest.approx(acc.get_epsilon(1e-5))
    assert logging.getLogger("absl").level == before
