"""Reusable partitioning helpers: Dirichlet label skew, count splitting, region assignment.

Pure numpy. Every random function takes a ``numpy.random.Generator``; nothing touches a global
random state.

* :func:`dirichlet_proportions` — per-client class proportions p_u ~ Dir(α·1_K) (paper B.1.5:
  "Dirichlet α controls client-level heterogeneity").
* :func:`dirichlet_partition` — the usual label-skew split of an existing labelled dataset among
  clients (Hsu et al. 2019), for loaders of real data.
* :func:`split_counts` / :func:`client_sizes` / :func:`holdout_counts` — integer apportionment.
* :func:`assign_regions` — which region each client belongs to, for the region-assignment modes
  of paper App. G.4 (semantic, geographic proxy, random, adversarial).
* :func:`duplicate_groups` / :func:`leak_free_holdouts` — train / val / test assignments that
  never split one text across hold-outs (review data repeats texts a lot).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from regionfed.errors import ConfigError, DataError

ASSIGNMENT_MODES: tuple[str, ...] = ("semantic", "geographic", "random", "adversarial")


def dirichlet_proportions(
    rng: np.random.Generator, num_clients: int, num_classes: int, alpha: float
) -> np.ndarray:
    """Draw ``(num_clients, num_classes)`` class proportions, each row ~ Dirichlet(α·1).

    Small α gives clients concentrated on few classes; large α approaches the uniform mix.
    """
    if alpha <= 0 or not np.isfinite(alpha):
        raise ConfigError(f"alpha must be a positive number, got {alpha}")
    if num_clients < 0 or num_classes < 1:
        raise ConfigError("need num_clients >= 0 and num_classes >= 1")
    p = rng.dirichlet(np.full(num_classes, float(alpha)), size=num_clients)
    # Very small α can underflow a whole row to 0; fall back to one class drawn uniformly.
    bad = ~np.isfinite(p).all(axis=1) | (p.sum(axis=1) <= 0)
    for i in np.flatnonzero(bad):
        p[i] = 0.0
        p[i, rng.integers(num_classes)] = 1.0
    return p / p.sum(axis=1, keepdims=True)


def split_counts(total: int, weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Apportion ``total`` items by ``weights`` (largest-remainder method).

    The result is non-negative, sums exactly to ``total`` and each entry is within one of
    ``total · w_i / Σw``. Ties in the remainders go to the lower index (deterministic).
    """
    w = np.asarray(weights, dtype=float)
    if total < 0:
        raise ConfigError(f"cannot split a negative count ({total})")
    if w.ndim != 1 or w.size == 0 or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ConfigError("weights must be a non-empty vector of non-negative finite numbers "
                          "with a positive sum")
    exact = total * w / w.sum()
    base = np.floor(exact).astype(np.int64)
    short = int(total - base.sum())
    if short:
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:short]] += 1
    return base


def client_sizes(
    rng: np.random.Generator, total: int, num_clients: int, skew: float = 0.0, minimum: int = 1
) -> np.ndarray:
    """Number of examples per client, summing to ``total``.

    ``skew = 0``: as equal as possible. ``skew > 0``: proportional to lognormal(0, skew) weights
    on top of ``minimum`` examples each (no random draw is made when ``skew = 0``).
    """
    if num_clients < 1:
        raise ConfigError("need at least one client")
    if skew < 0:
        raise ConfigError(f"client size skew must be >= 0, got {skew}")
    if total < minimum * num_clients:
        raise ConfigError(f"{total} examples are too few for {num_clients} clients "
                          f"with at least {minimum} each")
    if skew == 0:
        return split_counts(total, np.ones(num_clients))
    weights = rng.lognormal(mean=0.0, sigma=float(skew), size=num_clients)
    return minimum + split_counts(total - minimum * num_clients, weights)


def holdout_counts(n: int, fraction: float, keep: int = 1, minimum: int = 0) -> int:
    """How many of ``n`` examples to hold out: ``round(n · fraction)`` (halves round up), at least
    ``minimum`` and leaving at least ``keep`` behind (never negative)."""
    k = int(np.floor(n * fraction + 0.5))
    k = max(k, minimum)
    return max(0, min(k, n - keep))


def dirichlet_partition(
    rng: np.random.Generator,
    labels: Sequence[int] | np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Split example indices among clients with Dirichlet label skew (Hsu et al. 2019).

    For every class c, its examples are divided among the clients with proportions
    q_c ~ Dir(α·1_N). Redrawn (up to ``max_tries`` times) until every client has at least
    ``min_size`` examples. Returns one sorted index array per client.
    """
    y = np.asarray(labels)
    if num_clients < 1:
        raise ConfigError("need at least one client")
    if alpha <= 0:
        raise ConfigError(f"alpha must be > 0, got {alpha}")
    if len(y) < num_clients * min_size:
        raise ConfigError(f"{len(y)} examples are too few for {num_clients} clients "
                          f"with at least {min_size} each")
    classes = np.unique(y)
    parts: list[np.ndarray] = []
    for _ in range(max_tries):
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            q = dirichlet_proportions(rng, 1, num_clients, alpha)[0]
            cuts = np.cumsum(split_counts(len(idx), q))[:-1]
            for u, chunk in enumerate(np.split(idx, cuts)):
                buckets[u].append(chunk)
        parts = [np.sort(np.concatenate(b)) if b else np.zeros(0, np.int64) for b in buckets]
        if min(len(p) for p in parts) >= min_size:
            return parts
    raise ConfigError(f"could not give every client {min_size} examples in {max_tries} draws; "
                      "raise alpha or lower the number of clients")


def assign_regions(
    rng: np.random.Generator,
    profiles: Sequence[int] | np.ndarray,
    num_regions: int,
    mode: str = "semantic",
    fidelity: float = 0.6,
) -> np.ndarray:
    """Assign each client to a region (paper App. G.4, region misspecification).

    ``profiles[i]`` is the region whose data distribution client i follows. Modes:

    * ``semantic``: region = profile (category-coherent regions).
    * ``geographic``: each client keeps its profile's region with probability ``fidelity``;
      the others are shuffled among themselves, so region sizes equal the profile group sizes.
    * ``random``: a uniformly random permutation of the profile labels (balanced, no coherence).
    * ``adversarial``: clients sorted by profile are dealt round-robin over the regions, so a
      region gets clients of ``min(group size, num_regions)`` different profiles and sizes differ
      by at most one.
    """
    p = np.asarray(profiles, dtype=np.int64)
    if num_regions < 1:
        raise ConfigError("need at least one region")
    if p.size and (p.min() < 0 or p.max() >= num_regions):
        raise ConfigError(f"profiles must be in 0..{num_regions - 1}")
    if mode == "semantic":
        return p.copy()
    if mode == "random":
        return rng.permutation(p)
    if mode == "geographic":
        if not 0.0 <= fidelity <= 1.0:
            raise ConfigError(f"geographic fidelity must be in [0, 1], got {fidelity}")
        out = p.copy()
        movers = np.flatnonzero(rng.random(p.size) >= fidelity)
        out[movers] = rng.permutation(p[movers])
        return out
    if mode == "adversarial":
        out = np.empty_like(p)
        out[np.argsort(p, kind="stable")] = np.arange(p.size) % num_regions
        return out
    raise ConfigError(f"unknown region assignment {mode!r}; expected one of "
                      f"{', '.join(ASSIGNMENT_MODES)}")


TRAIN, VAL, TEST = 0, 1, 2


def duplicate_groups(texts: Sequence[str]) -> np.ndarray:
    """A group id per text: texts equal after lowercasing and collapsing whitespace share one
    (ids in order of first appearance)."""
    ids: dict[str, int] = {}
    return np.array([ids.setdefault(" ".join(t.lower().split()), len(ids)) for t in texts],
                    dtype=np.int64)


def repeated_texts(groups: np.ndarray) -> int:
    """How many texts repeat an earlier one, from their :func:`duplicate_groups` ids."""
    return len(groups) - len(np.unique(groups))


def leak_free_holdouts(rng: np.random.Generator, groups: Sequence[int] | np.ndarray,
                       regions: Sequence[str], num_clients: int, val_fraction: float,
                       test_fraction: float) -> np.ndarray:
    """Per example :data:`TRAIN`, :data:`VAL` or :data:`TEST`, every member of a group
    (:func:`duplicate_groups`, across regions too) in the same split.

    Each region's hold-out targets are :func:`region_client_splits`'s (``holdout_counts``:
    at least one test example, ``num_clients`` training examples left). Groups are visited
    in a seeded random order; a group joins test, else validation, if it fits the room left
    there in every region it has members in, else training — so a hold-out never exceeds its
    target, and a group larger than the room left lands in training. A region left without a
    test example then gets its smallest training group that can move. DataError if none can.
    """
    group = np.asarray(groups, dtype=np.int64)
    # regions as integer codes: a federation may pass thousands (one per client)
    names, region = np.unique(np.asarray(regions), return_inverse=True)
    n = np.bincount(region, minlength=len(names))
    target = {TEST: np.array([holdout_counts(int(m), test_fraction, keep=num_clients,
                                             minimum=1) for m in n], dtype=np.int64)}
    target[VAL] = np.array([holdout_counts(int(m - t), val_fraction, keep=num_clients)
                            for m, t in zip(n, target[TEST], strict=True)], dtype=np.int64)
    _, inverse = np.unique(group, return_inverse=True)
    members = np.split(np.argsort(inverse, kind="stable"),
                       np.cumsum(np.bincount(inverse))[:-1])
    sizes = [np.unique(region[m], return_counts=True) for m in members]
    fill = {s: np.zeros(len(names), dtype=np.int64) for s in (TRAIN, VAL, TEST)}
    split = np.full(len(group), TRAIN, dtype=np.int64)
    for k in rng.permutation(len(members)):
        where, count = sizes[k]
        chosen = next((s for s in (TEST, VAL)
                       if np.all(fill[s][where] + count <= target[s][where])), TRAIN)
        split[members[k]] = chosen
        fill[chosen][where] += count
    lacking = np.flatnonzero(fill[TEST] == 0)
    if len(lacking):
        in_region: dict[int, list[int]] = {int(r): [] for r in lacking}
        for k, (where, _) in enumerate(sizes):
            for r in where.tolist():
                if r in in_region:
                    in_region[r].append(k)
    for r in lacking.tolist():
        if fill[TEST][r]:  # a group moved for an earlier region covered this one
            continue
        movable = [k for k in in_region[r] if split[members[k][0]] == TRAIN
                   and np.all(fill[TRAIN][sizes[k][0]] - sizes[k][1] >= num_clients)]
        if not movable:
            raise DataError(f"region {str(names[r])!r}: its texts repeat so much that no test "
                            f"example can be held out without leaving fewer than "
                            f"{num_clients} training examples")
        k = min(movable, key=lambda k: (int(sizes[k][1].sum()), k))
        split[members[k]] = TEST
        fill[TRAIN][sizes[k][0]] -= sizes[k][1]
        fill[TEST][sizes[k][0]] += sizes[k][1]
    return split


def region_client_splits(
    rng: np.random.Generator,
    labels: Sequence[int] | np.ndarray,
    num_clients: int,
    alpha: float,
    val_fraction: float,
    test_fraction: float,
    holdouts: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Split one region's examples into train / val / test, then deal each split to clients.

    1. A seeded permutation; the first ``round(n · test_fraction)`` examples (at least one)
       are test, the next ``round(n_rest · val_fraction)`` validation, the rest training;
       both hold-outs leave at least ``num_clients`` training examples
       (:func:`holdout_counts`). With ``holdouts`` (per example :data:`TRAIN` / :data:`VAL`
       / :data:`TEST`, e.g. from :func:`leak_free_holdouts`) the splits are those, each in a
       seeded random order.
    2. Label skew (Hsu et al. 2019): per class c one draw q_c ~ Dir(α·1_K) over the K clients
       (:func:`dirichlet_proportions`); the class-c examples of *every* split are apportioned
       by q_c (:func:`split_counts`), so a client's val/test mix mirrors its training mix.
    3. A client left without training examples takes the last training example of the client
       with the most (lowest index on ties), until every client has one.

    Returns one ``(train, val, test)`` triple of sorted index arrays per client. Needs
    ``len(labels) >= num_clients``; a region needs ``num_clients + 1`` examples for a test
    example.
    """
    y = np.asarray(labels)
    n = len(y)
    if num_clients < 1:
        raise ConfigError("need at least one client")
    if n < num_clients:
        raise ConfigError(f"{n} examples are too few for {num_clients} clients with a "
                          "training example each")
    if holdouts is not None:
        parts = tuple(rng.permutation(np.flatnonzero(np.asarray(holdouts) == s))
                      for s in (TRAIN, VAL, TEST))
    else:
        perm = rng.permutation(n)
        n_test = holdout_counts(n, test_fraction, keep=num_clients, minimum=1)
        n_val = holdout_counts(n - n_test, val_fraction, keep=num_clients)
        parts = (perm[n_test + n_val:], perm[n_test:n_test + n_val], perm[:n_test])
    classes = np.unique(y)
    q = dirichlet_proportions(rng, len(classes), num_clients, alpha)
    dealt: list[list[list[int]]] = [[[] for _ in range(num_clients)] for _ in parts]
    for s, part in enumerate(parts):
        for c, cls in enumerate(classes):
            members = part[y[part] == cls]
            cuts = np.cumsum(split_counts(len(members), q[c]))[:-1]
            for u, chunk in enumerate(np.split(members, cuts)):
                dealt[s][u].extend(chunk.tolist())
    train = dealt[0]
    for u in range(num_clients):
        if not train[u]:
            donor = max(range(num_clients), key=lambda v: (len(train[v]), -v))
            train[u].append(train[donor].pop())
    out = []
    for u in range(num_clients):
        train_u, val_u, test_u = (np.array(sorted(dealt[s][u]), dtype=np.int64)
                                  for s in range(3))
        out.append((train_u, val_u, test_u))
    return out
