"""The private-release object: it noises from OS entropy and records what it noised."""

import math

import numpy as np
import pytest
import torch

from regionfed.errors import ConfigError
from regionfed.privacy import DPConfig
from regionfed.privacy.mechanism import bound_sensitivity, bounded_aggregate
from regionfed.privacy.releases import PrivateReleases, ReleaseEvent, secret_rng

UPDATES = [torch.full((50,), 0.01), torch.full((50,), -0.02)]


def _mean(releases: PrivateReleases) -> torch.Tensor:
    return releases.mean(UPDATES, None, 1.0, regions=["a"], what="model update", dim=50)


def test_noise_is_fresh_os_entropy_unless_a_test_seed_is_set():
    private = DPConfig(mode="user", sigma=1.0)
    first, second = _mean(PrivateReleases(private, 0.5)), _mean(PrivateReleases(private, 0.5))
    assert not torch.equal(first, second)  # same config, two runs: different noise
    seeded = DPConfig(mode="user", sigma=1.0, noise_seed=7)
    assert torch.equal(_mean(PrivateReleases(seeded, 0.5)), _mean(PrivateReleases(seeded, 0.5)))
    # the Poisson samples are secret too under DP (but follow the run seed without it)
    assert secret_rng(private, np.random.default_rng(0)).integers(2**62) != \
        np.random.default_rng(0).integers(2**62)
    assert secret_rng(DPConfig(mode="off"), np.random.default_rng(0)).integers(2**62) == \
        np.random.default_rng(0).integers(2**62)


def test_each_release_records_exactly_one_event():
    releases = PrivateReleases(DPConfig(mode="user", sigma=2.0), 0.25)
    _mean(releases)
    releases.joint_mean([(u, -u, 2 * u) for u in UPDATES], None, 1.0, regions=["b", "a"],
                        what="joint", dims=[50, 50, 50])
    assert releases.drain() == [
        ReleaseEvent("model update", 0.25, 2.0, 1, ("a",)),
        # three vectors, each clipped to C with noise σC: sensitivity √3·C → σ/√3
        ReleaseEvent("joint", 0.25, 2.0 / math.sqrt(3), 3, ("a", "b"))]
    assert releases.drain() == []
    region = PrivateReleases(DPConfig(mode="region", sigma=2.0), 0.25)
    _mean(region)  # the region is in every release: no amplification by sampling
    assert region.drain()[0].sample_rate == 1.0
    off = PrivateReleases(DPConfig(mode="off", sigma=2.0), 0.25)
    _mean(off)
    assert off.drain()[0].noise_multiplier == 0.0  # no noise: ε = ∞ in the ledger
    with pytest.raises(ConfigError, match="2 vectors"):
        releases.joint_mean([(UPDATES[0],)], None, 1.0, regions=["a"], what="x",
                            dims=[50, 50])


def test_bounded_aggregate_clamps_each_entry_and_noises_at_the_joint_sensitivity():
    low = torch.tensor([-0.1, -0.1, 0.0], dtype=torch.float64)
    high = torch.tensor([0.1, 0.1, 1.0], dtype=torch.float64)
    assert bound_sensitivity(low, high) == pytest.approx(math.sqrt(0.01 + 0.01 + 1.0))
    vectors = [torch.tensor([5.0, -0.05, 0.5]), torch.tensor([-5.0, 0.02, 2.0])]
    exact = bounded_aggregate(vectors, None, low, high, DPConfig(mode="user", sigma=0.0),
                              0.0, 4.0, torch.Generator())
    assert torch.allclose(exact, torch.tensor([0.0, -0.03, 1.5], dtype=torch.float64) / 4)
    draws = torch.stack([
        bounded_aggregate([], None, low, high, DPConfig(mode="user", sigma=1.0), 3.0, 1.0,
                          torch.Generator().manual_seed(i)) for i in range(400)])
    assert draws.std().item() == pytest.approx(3.0 * bound_sensitivity(low, high), rel=0.1)
    with pytest.raises(ConfigError, match="low ≤ high"):
        bounded_aggregate([], None, high, low, DPConfig(), 1.0, 1.0, torch.Generator())


def test_selection_settings_are_validated():
    from pydantic import ValidationError

    for bad in ({"noise_seed": -1}, {"selection_sigma": 0.0}, {"selection_clip": 0.0},
                {"selection_sigma": float("nan")}):
        with pytest.raises(ValidationError):
            DPConfig(**bad)
    assert DPConfig(sigma=2.0).noise_multiplier_of_selection == 2.0
    assert DPConfig(sigma=2.0, selection_sigma=5.0).noise_multiplier_of_selection == 5.0


def test_a_split_budget_is_one_event_at_sigma_per_region_with_noise_split_as_stated():
    """Global mean at σ/√(1 − f), each region's mean at σ/√f: per region one Gaussian at
    (σ_g⁻² + σ_r⁻²)^(−1/2) = σ on one sample — and the noise really has those scales."""
    sigma, f, dim = 2.0, 0.2, 20_000
    releases = PrivateReleases(DPConfig(mode="user", sigma=sigma, clip=1.0), 0.5)
    expected = {"a": 4.0, "b": 6.0}
    global_mean, regional = releases.split_mean(
        [], None, [], expected, f, None, what="split", dim=dim)
    assert float(global_mean.std()) == pytest.approx(sigma / math.sqrt(1 - f) / 10.0, rel=0.03)
    for region, n in expected.items():
        assert float(regional[region].std()) == pytest.approx(sigma / math.sqrt(f) / n,
                                                              rel=0.03)
    assert releases.drain() == [ReleaseEvent("split", 0.5, sigma, 2, ("a",)),
                                ReleaseEvent("split", 0.5, sigma, 2, ("b",))]
    part = torch.zeros(dim, dtype=torch.bool)
    part[:10] = True
    _, regional = releases.split_mean([torch.ones(dim)], None, ["a"], {"a": 1.0}, f, part,
                                      what="split", dim=dim)
    assert regional["a"].shape == (10,)  # the regional release covers the part only
    with pytest.raises(ConfigError, match="share"):
        releases.split_mean([], None, [], expected, 1.0, None, what="split", dim=dim)
    with pytest.raises(ConfigError, match="user-level"):
        PrivateReleases(DPConfig(mode="region", sigma=1.0), 0.5).split_mean(
            [], None, [], expected, f, None, what="split", dim=dim)


def test_a_regional_clip_scales_the_regional_noise_and_costs_no_epsilon():
    """Clipping the regional part at C_r: the regional means' noise std is σ/√f·C_r/(q·n_r),
    the global one's is unchanged, and the events are the same (one at σ per region)."""
    sigma, f, dim, clip_r = 2.0, 0.2, 20_000, 0.25
    releases = PrivateReleases(DPConfig(mode="user", sigma=sigma, clip=1.0), 0.5)
    expected = {"a": 4.0, "b": 6.0}
    global_mean, regional = releases.split_mean(
        [], None, [], expected, f, None, what="split", dim=dim, regional_clip=clip_r)
    assert float(global_mean.std()) == pytest.approx(sigma / math.sqrt(1 - f) / 10.0, rel=0.03)
    for region, n in expected.items():
        assert float(regional[region].std()) == pytest.approx(
            sigma / math.sqrt(f) * clip_r / n, rel=0.03)
    assert releases.drain() == [ReleaseEvent("split", 0.5, sigma, 2, ("a",)),
                                ReleaseEvent("split", 0.5, sigma, 2, ("b",))]
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ConfigError, match="regional clip"):
            releases.split_mean([], None, [], expected, f, None, what="split", dim=dim,
                                regional_clip=bad)


def test_a_part_is_cut_from_the_clipped_update_so_the_offset_step_has_no_clipping_bias():
    """An update of norm 4 (C = 1) whose part holds a quarter of its norm: the regional mean
    of the part is the part of the clipped update, exactly the global mean's part, where C_r
    does not bind, and clipped to C_r where it does. Noise-free (σ = 0)."""
    dim = 16
    update = torch.zeros(dim)
    update[0], update[8] = 1.0, math.sqrt(15.0)  # ‖Δ‖ = 4, ‖Δ[part]‖ = 1
    part = torch.zeros(dim, dtype=torch.bool)
    part[:8] = True
    releases = PrivateReleases(DPConfig(mode="user", sigma=0.0, clip=1.0), 1.0)
    for clip_r, expected_first in ((0.5, 0.25), (0.1, 0.1)):
        global_mean, regional = releases.split_mean(
            [update], None, ["a"], {"a": 1.0}, 0.5, part, what="split", dim=dim,
            regional_clip=clip_r)
        assert float(global_mean[0]) == pytest.approx(0.25)  # clip(Δ, 1) = Δ/4
        assert float(regional["a"][0]) == pytest.approx(expected_first)
    off = PrivateReleases(DPConfig(mode="off"), 1.0)  # without DP nothing is clipped
    _, regional = off.split_mean([update], None, ["a"], {"a": 1.0}, 0.5, part, what="split",
                                 dim=dim, regional_clip=0.1)
    assert float(regional["a"][0]) == pytest.approx(1.0)
