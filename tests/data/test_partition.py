"""Tests of the partitioning helpers (Dirichlet label skew, counts, region assignment)."""

from __future__ import annotations

import numpy as np
import pytest

from regionfed.data.partition import (
    TEST,
    TRAIN,
    VAL,
    assign_regions,
    client_sizes,
    dirichlet_partition,
    dirichlet_proportions,
    duplicate_groups,
    holdout_counts,
    leak_free_holdouts,
    region_client_splits,
    split_counts,
)
from regionfed.errors import ConfigError, DataError


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------ Dirichlet


def test_dirichlet_rows_are_distributions() -> None:
    p = dirichlet_proportions(rng(), 50, 8, 0.3)
    assert p.shape == (50, 8)
    assert np.allclose(p.sum(axis=1), 1.0) and (p >= 0).all()


def test_dirichlet_concentration_controls_skew() -> None:
    low = dirichlet_proportions(rng(), 2000, 8, 0.1).max(axis=1).mean()
    high = dirichlet_proportions(rng(), 2000, 8, 2.0).max(axis=1).mean()
    huge = dirichlet_proportions(rng(), 2000, 8, 1000.0).max(axis=1).mean()
    assert low > 0.7 and high < 0.4 and huge < 0.15


def test_dirichlet_tiny_alpha_never_nan() -> None:
    p = dirichlet_proportions(rng(), 500, 8, 1e-4)
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)


@pytest.mark.parametrize("alpha", [0.0, -1.0, float("nan")])
def test_dirichlet_rejects_bad_alpha(alpha: float) -> None:
    with pytest.raises(ConfigError, match="alpha"):
        dirichlet_proportions(rng(), 3, 4, alpha)


def test_dirichlet_partition_covers_every_index_once() -> None:
    labels = np.repeat(np.arange(10), 100)
    parts = dirichlet_partition(rng(), labels, 20, alpha=0.3, min_size=5)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(1000))
    assert min(len(p) for p in parts) >= 5


def test_dirichlet_partition_skew_depends_on_alpha() -> None:
    labels = np.repeat(np.arange(10), 200)

    def purity(alpha: float) -> float:
        parts = dirichlet_partition(rng(3), labels, 20, alpha=alpha)
        return float(np.mean([np.bincount(labels[p]).max() / len(p) for p in parts]))

    assert purity(0.1) > purity(100.0) + 0.3


def test_dirichlet_partition_too_few_examples() -> None:
    with pytest.raises(ConfigError, match="too few"):
        dirichlet_partition(rng(), [0, 1, 2], 5, alpha=1.0)


# ------------------------------------------------------------------------------ counts


@pytest.mark.parametrize("total", [0, 1, 7, 100, 20001])
def test_split_counts_sum_and_proportional(total: int) -> None:
    w = np.array([0.5, 0.2, 0.2, 0.1, 0.0])
    c = split_counts(total, w)
    assert c.sum() == total and (c >= 0).all()
    assert np.all(np.abs(c - total * w / w.sum()) < 1.0)
    assert c[-1] == 0


def test_split_counts_equal_weights_and_errors() -> None:
    assert split_counts(10, [1, 1, 1]).tolist() == [4, 3, 3]
    with pytest.raises(ConfigError):
        split_counts(-1, [1.0])
    with pytest.raises(ConfigError):
        split_counts(5, [0.0, 0.0])
    with pytest.raises(ConfigError):
        split_counts(5, [])


def test_client_sizes_equal_and_skewed() -> None:
    assert client_sizes(rng(), 20000, 80).tolist() == [250] * 80
    skew = client_sizes(rng(), 20000, 80, skew=1.5, minimum=2)
    assert skew.sum() == 20000 and skew.min() >= 2
    assert skew.max() > 3 * np.median(skew)
    with pytest.raises(ConfigError, match="too few"):
        client_sizes(rng(), 10, 8, minimum=2)
    with pytest.raises(ConfigError):
        client_sizes(rng(), 10, 2, skew=-1.0)


def test_holdout_counts() -> None:
    assert holdout_counts(250, 0.2) == 50
    assert holdout_counts(5, 0.1, keep=1, minimum=1) == 1
    assert holdout_counts(2, 0.9, keep=1) == 1
    assert holdout_counts(1, 0.5, keep=1, minimum=1) == 0
    assert holdout_counts(25, 0.1) == 3  # 2.5 rounds up


# ------------------------------------------------------------------------------ regions

M, K = 8, 10
PROFILES = np.repeat(np.arange(M), K)


def test_semantic_is_identity() -> None:
    assert np.array_equal(assign_regions(rng(), PROFILES, M, "semantic"), PROFILES)


def test_random_is_balanced_and_mixed() -> None:
    a = assign_regions(rng(), PROFILES, M, "random")
    assert np.bincount(a, minlength=M).tolist() == [K] * M
    assert np.mean(a == PROFILES) < 0.4


@pytest.mark.parametrize("fidelity", [0.0, 0.3, 0.6, 1.0])
def test_geographic_keeps_sizes_and_fidelity(fidelity: float) -> None:
    profiles = np.repeat(np.arange(M), 500)
    a = assign_regions(rng(5), profiles, M, "geographic", fidelity=fidelity)
    assert np.bincount(a, minlength=M).tolist() == [500] * M
    stay = np.mean(a == profiles)
    expected = fidelity + (1 - fidelity) / M  # movers shuffled uniformly
    assert abs(stay - expected) < 0.03


@pytest.mark.parametrize(("m", "k"), [(8, 3), (8, 8), (8, 10), (4, 25), (16, 2)])
def test_adversarial_spreads_profiles(m: int, k: int) -> None:
    profiles = np.repeat(np.arange(m), k)
    a = assign_regions(rng(), profiles, m, "adversarial")
    sizes = np.bincount(a, minlength=m)
    assert sizes.max() - sizes.min() <= 1
    for r in range(m):
        assert len(set(profiles[a == r].tolist())) == min(k, m)


def test_assignment_errors() -> None:
    with pytest.raises(ConfigError, match="unknown region assignment"):
        assign_regions(rng(), PROFILES, M, "north")
    with pytest.raises(ConfigError):
        assign_regions(rng(), PROFILES, 4, "semantic")
    with pytest.raises(ConfigError, match="fidelity"):
        assign_regions(rng(), PROFILES, M, "geographic", fidelity=1.5)


def test_assignment_is_seeded() -> None:
    a = assign_regions(rng(1), PROFILES, M, "random")
    b = assign_regions(rng(1), PROFILES, M, "random")
    c = assign_regions(rng(2), PROFILES, M, "random")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# ------------------------------------------------------------------------------ regions


@pytest.mark.parametrize("n, clients, alpha", [(40, 4, 0.1), (5, 4, 0.3), (200, 3, 100.0)])
def test_region_client_splits_partition_the_examples(n, clients, alpha) -> None:
    labels = np.arange(n) % 3
    parts = region_client_splits(rng(1), labels, clients, alpha, 0.1, 0.2)
    assert len(parts) == clients
    flat = np.concatenate([idx for triple in parts for idx in triple])
    assert sorted(flat.tolist()) == list(range(n))  # every example exactly once
    assert all(len(train) >= 1 for train, _, _ in parts)
    n_test = sum(len(test) for _, _, test in parts)
    assert n_test == holdout_counts(n, 0.2, keep=clients, minimum=1)
    again = region_client_splits(rng(1), labels, clients, alpha, 0.1, 0.2)
    assert all(np.array_equal(a, b) for x, y in zip(parts, again, strict=True)
               for a, b in zip(x, y, strict=True))


def test_region_client_splits_skew_is_shared_by_the_splits() -> None:
    labels = np.repeat([0, 1], 1000)
    parts = region_client_splits(rng(2), labels, 3, 1.0, 0.2, 0.2)
    shares = []
    for train, val, test in parts:  # a client's val/test mix follows its training mix
        assert min(len(train), len(val), len(test)) >= 20
        share = [labels[idx].mean() for idx in (train, val, test)]
        assert max(share) - min(share) < 0.1
        shares.append(share[0])
    assert max(shares) - min(shares) > 0.2  # and the clients differ (label skew)
    with pytest.raises(ConfigError, match="too few"):
        region_client_splits(rng(), [0, 1], 3, 1.0, 0.1, 0.2)


# ------------------------------------------------------------------------- leak-free hold-outs


def test_duplicate_groups_ignore_case_and_spacing():
    groups = duplicate_groups(["Great product", "great  product ", "Bad", "GREAT PRODUCT"])
    assert groups.tolist() == [0, 0, 1, 0]


def test_leak_free_holdouts_keep_every_group_in_one_split_within_the_targets():
    rng = np.random.default_rng(0)
    # 300 examples, 60 texts repeated 1-9 times, spread over three regions (texts shared)
    sizes = rng.integers(1, 10, size=60)
    groups = np.repeat(np.arange(60), sizes)[:300]
    regions = rng.choice(["a", "b", "c"], size=len(groups))
    split = leak_free_holdouts(np.random.default_rng(1), groups, regions, num_clients=3,
                               val_fraction=0.1, test_fraction=0.2)
    for g in np.unique(groups):
        assert len(set(split[groups == g].tolist())) == 1  # never straddles
    for r in ("a", "b", "c"):
        n = int((regions == r).sum())
        mine = split[regions == r]
        n_test = holdout_counts(n, 0.2, keep=3, minimum=1)
        assert 1 <= (mine == TEST).sum() <= n_test
        assert (mine == VAL).sum() <= holdout_counts(n - n_test, 0.1, keep=3)
        assert (mine == TRAIN).sum() >= 3
    assert (split == TEST).sum() >= 0.7 * 0.2 * len(groups)  # close to the target overall


def test_a_region_of_one_repeated_text_cannot_be_held_out():
    with pytest.raises(DataError, match="region 'a': its texts repeat so much"):
        leak_free_holdouts(np.random.default_rng(0), [0] * 5, ["a"] * 5, num_clients=2,
                           val_fraction=0.1, test_fraction=0.2)


def test_given_holdouts_are_the_splits_dealt_to_clients():
    holdouts = np.array([TRAIN] * 6 + [VAL] * 2 + [TEST] * 2)
    labels = np.array([0, 1] * 5)
    splits = region_client_splits(np.random.default_rng(0), labels, 2, 1.0, 0.1, 0.2,
                                  holdouts=holdouts)
    for s, kind in enumerate((TRAIN, VAL, TEST)):
        dealt = sorted(i for client in splits for i in client[s].tolist())
        assert dealt == np.flatnonzero(holdouts == kind).tolist()
