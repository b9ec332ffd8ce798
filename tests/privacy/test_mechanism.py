"""Clipping and the regional Gaussian mechanism (SPEC §3 step 3; paper Alg. 2)."""

import pytest
import torch
from pydantic import ValidationError

from regionfed.errors import ConfigError, NumericalError
from regionfed.privacy import DPConfig, clip_update, noise_std_of_mean, regional_aggregate


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_clip_update_bounds_norm_and_keeps_small():
    g = _gen(1)
    for scale in (1e-3, 0.1, 0.5, 2.0, 10.0, 1e4):
        v = torch.randn(500, generator=g) * scale / 500**0.5
        out = clip_update(v, 1.0)
        assert torch.linalg.vector_norm(out) <= 1.0 + 1e-6
        if torch.linalg.vector_norm(v) <= 1.0:
            assert torch.equal(out, v)
        else:  # same direction, norm exactly C
            assert torch.linalg.vector_norm(out) == pytest.approx(1.0, rel=1e-5)
            assert torch.allclose(out / out.norm(), v / v.norm(), atol=1e-6)
    z = torch.zeros(10)
    assert torch.equal(clip_update(z, 1.0), z)
    with pytest.raises(ConfigError):
        clip_update(z, 0.0)


def test_dpconfig_validation():
    assert DPConfig().mode == "user" and DPConfig().sigma == 0.0
    for bad in ({"sigma": -1.0}, {"clip": 0.0}, {"delta": 1.0}, {"mode": "client"},
                {"noise": 1.0}):
        with pytest.raises(ValidationError):
            DPConfig(**bad)


def test_user_mode_noise_std_is_sigma_c_over_expected_clients():
    # n_r = 10 clients, q = 1 → expected 10; all updates zero; dimension 20,000
    cfg = DPConfig(mode="user", sigma=4.0, clip=0.5)
    updates = [torch.zeros(20_000) for _ in range(10)]
    out = regional_aggregate(updates, [1.0] * 10, cfg, expected_clients=10.0,
                             generator=_gen(3))
    want = 4.0 * 0.5 / 10.0
    assert noise_std_of_mean(cfg, 10.0) == pytest.approx(want)
    assert out.std().item() == pytest.approx(want, rel=0.05)
    assert abs(out.mean().item()) < 5 * want / 20_000**0.5


def test_user_mode_fixed_denominator_and_ignores_weights():
    # q = 0.5, n_r = 10 → denominator 5 whatever the number of updates actually sampled
    cfg = DPConfig(mode="user", sigma=0.0, clip=100.0)
    for count in (1, 3, 8):
        updates = [torch.full((4,), float(i + 1)) for i in range(count)]
        weights = [float(10 * (i + 1)) for i in range(count)]
        out = regional_aggregate(updates, weights, cfg, expected_clients=0.5 * 10,
                                 generator=_gen())
        assert torch.allclose(out, torch.stack(updates).sum(0) / 5.0)


def test_user_mode_clips_each_update_before_summing():
    cfg = DPConfig(mode="user", sigma=0.0, clip=1.0)
    big = torch.tensor([30.0, 40.0])  # norm 50 → clipped to (0.6, 0.8)
    small = torch.tensor([0.1, 0.0])
    out = regional_aggregate([big, small], None, cfg, expected_clients=2.0, generator=_gen())
    assert torch.allclose(out, torch.tensor([0.35, 0.4]))


def test_user_mode_empty_round_releases_noise():
    cfg = DPConfig(mode="user", sigma=2.0, clip=1.0)
    out = regional_aggregate([], [], cfg, expected_clients=4.0, generator=_gen(5), dim=20_000)
    assert out.shape == (20_000,)
    assert out.std().item() == pytest.approx(2.0 / 4.0, rel=0.05)
    with pytest.raises(ConfigError):
        regional_aggregate([], [], cfg, expected_clients=4.0, generator=_gen())
    for mode in ("region", "off"):
        assert regional_aggregate([], [], DPConfig(mode=mode, sigma=2.0), 4.0, _gen()) is None


def test_off_mode_is_exact_weighted_mean():
    g = _gen(7)
    updates = [torch.randn(50, generator=g) * 10 for _ in range(3)]
    weights = [1.0, 2.0, 5.0]
    cfg = DPConfig(mode="off", sigma=4.0, clip=0.1)
    out = regional_aggregate(updates, weights, cfg, expected_clients=3.0, generator=_gen())
    want = torch.zeros(50)
    for w, u in zip(weights, updates, strict=True):
        want += (w / 8.0) * u
    assert torch.equal(out, want)
    assert noise_std_of_mean(cfg, 3.0) == 0.0


def test_region_mode_clips_aggregate_and_noise_is_sigma_c():
    g = _gen(8)
    updates = [torch.randn(100, generator=g) * 5 for _ in range(4)]
    weights = [10.0, 1.0, 1.0, 1.0]
    out = regional_aggregate(updates, weights, DPConfig(mode="region", sigma=0.0, clip=1.0),
                             expected_clients=4.0, generator=_gen())
    mean = sum(w * u for w, u in zip(weights, updates, strict=True)) / 13.0
    assert torch.linalg.vector_norm(out) == pytest.approx(1.0, rel=1e-5)
    assert torch.allclose(out, mean / mean.norm(), atol=1e-6)
    # noise: zero updates → pure N(0, σ²C²)
    cfg = DPConfig(mode="region", sigma=3.0, clip=0.5)
    zeros = [torch.zeros(20_000) for _ in range(5)]
    noisy = regional_aggregate(zeros, [1.0] * 5, cfg, expected_clients=5.0, generator=_gen(9))
    assert noise_std_of_mean(cfg, 5.0) == pytest.approx(1.5)
    assert noisy.std().item() == pytest.approx(1.5, rel=0.05)


def test_nonfinite_update_is_rejected_with_index():
    cfg = DPConfig(mode="user", sigma=1.0)
    bad = torch.zeros(5)
    bad[2] = float("nan")
    for mode in ("user", "region", "off"):
        with pytest.raises(NumericalError, match="update 1"):
            regional_aggregate([torch.zeros(5), bad], [1.0, 1.0],
                               cfg.model_copy(update={"mode": mode}), 2.0, _gen())
    inf = torch.zeros(5)
    inf[0] = float("inf")
    with pytest.raises(NumericalError, match="update 0"):
        regional_aggregate([inf], [1.0], cfg, 1.0, _gen())


def test_same_seed_same_noise():
    cfg = DPConfig(mode="user", sigma=1.0)
    ups = [torch.ones(100) * 0.01]
    a = regional_aggregate(ups, [1.0], cfg, 1.0, _gen(42))
    b = regional_aggregate(ups, [1.0], cfg, 1.0, _gen(42))
    c = regional_aggregate(ups, [1.0], cfg, 1.0, _gen(43))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_input_validation():
    cfg = DPConfig(mode="user", sigma=1.0)
    with pytest.raises(ConfigError):
        regional_aggregate([torch.zeros(3)], [1.0], cfg, 0.0, _gen())
    with pytest.raises(ConfigError):
        regional_aggregate([torch.zeros(3), torch.zeros(4)], [1.0, 1.0], cfg, 2.0, _gen())
    with pytest.raises(ConfigError):
        regional_aggregate([torch.zeros(3)], [1.0, 2.0], cfg, 1.0, _gen())
    with pytest.raises(ConfigError):
        regional_aggregate([torch.zeros(3)], [0.0], DPConfig(mode="off"), 1.0, _gen())
