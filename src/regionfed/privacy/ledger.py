"""Privacy accounting with Google's ``dp-accounting`` and the run's ledger (docs/privacy.md).

One round of the ``user``-mode regional mechanism (docs/privacy.md) is the Poisson-subsampled
Gaussian mechanism: every user is sampled with probability q, contributes a clipped update
(L2 ≤ C) to its region's sum, and the sum gets N(0, σ²C²·I). Each user belongs to exactly one
region, so the M regional releases of a round touch disjoint users and compose in *parallel*:
per user, T rounds are the T-fold composition

    M_T = SelfComposed(PoissonSampled(q, Gaussian(σ)), T)

under the add-or-remove-one-user neighbouring relation. ε is computed by the library's
accountants — PLD (tight; ``PLDAccountant``) and RDP (``RdpAccountant``, looser) — never by a
hand-rolled formula. With q = 1 the event is the plain Gaussian (no sampling wrapper).

``region`` mode (paper Algorithm 2) clips and noises the *regional aggregate*; the protected
unit is a whole region, and a region takes part in every round whatever the client sampling,
so the ledger accounts it with q = 1 (no amplification by sampling); see
:class:`PrivacyLedger`.

Known values (paper §3.2 setting): σ = 4, q = 0.1, T = 50, δ = 1e-5 → ε_RDP ≈ 0.758, ε_PLD ≈ 0.684
(the paper's ε ≈ 0.60 is not reproduced by either accountant).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import DPConfig
from regionfed.privacy.releases import ReleaseEvent

if TYPE_CHECKING:
    import dp_accounting

# dp_accounting (and the scipy.signal it pulls in, ~1 s) is imported where ε is computed:
# a client process of the Flower runtimes imports this module but never accounts

__all__ = [
    "PLD_VALUE_DISCRETIZATION",
    "Accountant",
    "PrivacyLedger",
    "composed_epsilon",
    "compute_epsilon",
    "dp_event",
    "epsilon_pld",
    "epsilon_rdp",
    "rounds_within_budget",
    "sigma_for_epsilon",
]

Accountant = Literal["pld", "rdp"]

#: ``value_discretization_interval`` of the PLD accountant. The library default is 1e-4;
#: 1e-3 changes ε by < 2e-4 in the regimes we checked (σ ∈ [0.5, 4], q ∈ {0.1, 1},
#: T ∈ [50, 1000]) and is ~4–10× faster (σ=4, q=0.1, T=50: ~15 ms). The PLD discretization
#: is pessimistic, so ε is an upper bound on the exact value.
PLD_VALUE_DISCRETIZATION = 1e-3

#: σ search range of :func:`sigma_for_epsilon` (PLD gets slow and huge below ~0.1).
_SIGMA_MIN = 0.05
_SIGMA_MAX = 1e6


def _validate(sigma: float, sample_rate: float, rounds: int, delta: float) -> None:
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ConfigError(f"noise multiplier sigma must be finite and ≥ 0, got {sigma}")
    if not (0.0 < sample_rate <= 1.0):
        raise ConfigError(f"sample rate q must be in (0, 1], got {sample_rate}")
    if isinstance(rounds, bool) or int(rounds) != rounds or rounds < 0:
        raise ConfigError(f"rounds must be an integer ≥ 0, got {rounds}")
    if not (0.0 < delta < 1.0):
        raise ConfigError(f"delta must be in (0, 1), got {delta}")


def _validate_accountant(accountant: str) -> None:
    if accountant not in ("pld", "rdp"):
        raise ConfigError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")


def dp_event(sigma: float, sample_rate: float, rounds: int) -> dp_accounting.DpEvent:
    """The ``dp-accounting`` event of ``rounds`` rounds of the regional mechanism.

    ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``; for q = 1 the plain
    ``SelfComposed(Gaussian(σ), T)``.
    """
    import dp_accounting

    gaussian = dp_accounting.GaussianDpEvent(sigma)
    event = (gaussian if sample_rate >= 1.0
             else dp_accounting.PoissonSampledDpEvent(sample_rate, gaussian))
    return dp_accounting.SelfComposedDpEvent(event, int(rounds))


@functools.lru_cache(maxsize=4096)
def _epsilon_cached(sigma: float, sample_rate: float, rounds: int, delta: float,
                    accountant: str) -> float:
    if rounds == 0:
        return 0.0
    if sigma == 0.0:
        return math.inf
    return _accountant_epsilon(dp_event(sigma, sample_rate, rounds), delta, accountant)


def _accountant_epsilon(event: dp_accounting.DpEvent, delta: float, accountant: str) -> float:
    """ε at δ of one dp-accounting event, by the PLD (our discretization) or RDP accountant."""
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    acc: dp_accounting.PrivacyAccountant
    if accountant == "pld":
        acc = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    else:
        acc = RdpAccountant()
    with _quiet_absl():
        acc.compose(event)
        return float(acc.get_epsilon(delta))


def composed_epsilon(compositions: Sequence[tuple[float, float, int]], delta: float,
                     accountant: Accountant = "pld") -> float:
    """ε of ``Composed([SelfComposed(PoissonSampled(q, Gaussian(σ)), n), …])`` (plain
    ``Gaussian(σ)`` where q = 1) for ``(q, σ, n)`` triples, by ``dp-accounting``.

    A single triple is :func:`compute_epsilon` (cached). Raises :class:`ConfigError` on
    invalid values; σ = 0 in any triple → ``math.inf``.
    """
    _validate_accountant(accountant)
    compositions = [(float(q), float(s), int(n)) for q, s, n in compositions if n > 0]
    for q, s, n in compositions:
        _validate(s, q, n, delta)
    if not compositions:
        return 0.0
    if len(compositions) == 1:
        return compute_epsilon(compositions[0][1], compositions[0][0], compositions[0][2],
                               delta, accountant)
    if any(s == 0.0 for _, s, _ in compositions):
        return math.inf
    import dp_accounting

    return _accountant_epsilon(
        dp_accounting.ComposedDpEvent([dp_event(s, q, n) for q, s, n in compositions]),
        delta, accountant)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting's RDP logs one absl WARNING per order it cannot evaluate at small σ
    ("…failed to converge… Excluding this order"), dozens per call; the orders are excluded
    correctly and ε stays a valid bound, so those lines are noise to users."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def compute_epsilon(sigma: float, sample_rate: float, rounds: int, delta: float,
                    accountant: Accountant = "pld") -> float:
    """ε after ``rounds`` rounds at noise multiplier σ, sampling rate q, and δ.

    σ = 0 → ``math.inf`` (no noise, no DP); rounds = 0 → 0.0. Results are cached.

    Raises:
        ConfigError: σ < 0, q ∉ (0, 1], rounds not an integer ≥ 0, δ ∉ (0, 1), unknown
            accountant.
    """
    _validate(sigma, sample_rate, rounds, delta)
    _validate_accountant(accountant)
    return _epsilon_cached(float(sigma), float(sample_rate), int(rounds), float(delta),
                           accountant)


def epsilon_pld(sigma: float, sample_rate: float, rounds: int, delta: float) -> float:
    """ε of ``rounds``-fold Poisson-subsampled Gaussian by the PLD accountant (tight).

    Uses ``PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)`` on
    :func:`dp_event`; see :func:`compute_epsilon` for the special cases.
    """
    return compute_epsilon(sigma, sample_rate, rounds, delta, "pld")


def epsilon_rdp(sigma: float, sample_rate: float, rounds: int, delta: float) -> float:
    """ε of ``rounds``-fold Poisson-subsampled Gaussian by the RDP accountant.

    Uses ``RdpAccountant()`` with the library's default orders on :func:`dp_event`.
    """
    return compute_epsilon(sigma, sample_rate, rounds, delta, "rdp")


def sigma_for_epsilon(target_epsilon: float, sample_rate: float, rounds: int, delta: float,
                      accountant: Accountant = "pld") -> float:
    """The smallest noise multiplier σ with ε(σ) ≤ ``target_epsilon`` (bisection on σ).

    ε is decreasing in σ. The search brackets σ by doubling/halving from 1, then bisects
    until ε(σ) ∈ [target·(1 − 1e-3), target] (or the bracket is narrower than 1e-7
    relative); the returned σ always satisfies ε(σ) ≤ target. (``dp_accounting``'s
    ``calibrate_dp_mechanism`` uses Brent's method, which does not guarantee the returned
    side of the root, hence the explicit bisection.)

    Raises:
        ConfigError: target ≤ 0, invalid q / δ / rounds (rounds must be ≥ 1), or a target
            that needs σ outside [0.05, 1e6].
    """
    if not (target_epsilon > 0.0 and math.isfinite(target_epsilon)):
        raise ConfigError(f"target epsilon must be finite and > 0, got {target_epsilon}")
    _validate(1.0, sample_rate, rounds, delta)
    _validate_accountant(accountant)
    if rounds == 0:
        raise ConfigError("rounds must be ≥ 1 to calibrate sigma (0 rounds cost nothing)")

    def eps(sigma: float) -> float:
        return compute_epsilon(sigma, sample_rate, rounds, delta, accountant)

    lo, hi = 1.0, 1.0  # invariant once bracketed: eps(lo) > target ≥ eps(hi)
    if eps(hi) <= target_epsilon:
        lo = hi / 2
        while eps(lo) <= target_epsilon:
            hi, lo = lo, lo / 2
            if lo < _SIGMA_MIN:
                raise ConfigError(
                    f"target epsilon {target_epsilon} needs sigma < {_SIGMA_MIN}; "
                    "that is too little noise to calibrate (use a smaller target)")
    else:
        hi = 2.0
        while eps(hi) > target_epsilon:
            lo, hi = hi, hi * 2
            if hi > _SIGMA_MAX:
                raise ConfigError(
                    f"target epsilon {target_epsilon} needs sigma > {_SIGMA_MAX:g}")
    while hi - lo > 1e-7 * hi and eps(hi) < target_epsilon * (1 - 1e-3):
        mid = 0.5 * (lo + hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def rounds_within_budget(target_epsilon: float, sigma: float, sample_rate: float,
                         delta: float, max_rounds: int,
                         accountant: Accountant = "pld") -> int:
    """The largest T ≤ ``max_rounds`` with ε(T) ≤ ``target_epsilon`` (binary search on T).

    ε(T) is non-decreasing in T, ε(0) = 0. With σ = 0 every round costs ε = ∞, so the
    answer is 0. Used by ``--target-epsilon`` to stop before the budget is exceeded.

    Raises:
        ConfigError: target < 0, invalid σ / q / δ, or ``max_rounds`` not an integer ≥ 0.
    """
    if not (target_epsilon >= 0.0) or math.isnan(target_epsilon):
        raise ConfigError(f"target epsilon must be ≥ 0, got {target_epsilon}")
    _validate(sigma, sample_rate, max_rounds, delta)
    _validate_accountant(accountant)

    def eps(t: int) -> float:
        return compute_epsilon(sigma, sample_rate, t, delta, accountant)

    if eps(max_rounds) <= target_epsilon:
        return int(max_rounds)
    lo, hi = 0, int(max_rounds)  # eps(lo) ≤ target < eps(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if eps(mid) <= target_epsilon:
            lo = mid
        else:
            hi = mid
    return lo


_PROTECTS = {
    "user": ("one user's (client's) entire data, at (ε, δ) per the ledger, over all rounds "
             "and every release listed in `events` (model updates and private model "
             "selection); regions compose in parallel because every user belongs to exactly "
             "one region"),
    "region": ("one whole region's data (paper Alg. 2 clips the regional aggregate), not a "
               "single user specifically: a user's own contribution is not separately "
               "clipped, and the region is in every round, so ε is accounted with q = 1 "
               "(no amplification by client sampling)"),
    "off": "nothing: no differential privacy",
}

#: what a run whose noise came from ``dp.noise_seed`` says wherever its ε appears
DETERMINISTIC_NOISE = "deterministic noise — not private"

EventKey = tuple[str, float, float, int, tuple[str, ...]]  # what, q, σ_eff, k, regions


class PrivacyLedger:
    """What a run has spent (docs/privacy.md), composed from the events the mechanism
    recorded (:class:`~regionfed.privacy.releases.PrivateReleases`).

    Every release event names the regions whose users it can touch. Users of different
    regions are disjoint, so for each region the ledger composes (``dp-accounting``,
    ``ComposedDpEvent`` of ``SelfComposedDpEvent`` terms) the events that touch it, and ε is the
    largest over regions (parallel composition). An event with noise multiplier 0 (``off``
    mode, σ = 0) makes ε = ∞; the record then says ``epsilon_pld = epsilon_rdp = None`` and
    ``epsilon_infinite = True``. ε values are cached per composition.
    """

    def __init__(self, config: DPConfig, sample_rate: float) -> None:
        if not isinstance(config, DPConfig):
            raise ConfigError(f"config must be a DPConfig, got {type(config).__name__}")
        _validate(config.sigma, sample_rate, 0, config.delta)
        self.config = config
        self.sample_rate = float(sample_rate)
        self.rounds = 0
        self.event_counts: dict[EventKey, int] = {}
        #: data-dependent choices that reached a released model without a DP release
        self.unaccounted: list[str] = []
        self._ldp: dict[tuple[str, float], int] = {}
        self._cache: dict[tuple[Any, str], float] = {}

    @property
    def accounting_sample_rate(self) -> float:
        """The q used by the accountant: the client rate in ``user`` mode, 1 in ``region``."""
        return 1.0 if self.config.mode == "region" else self.sample_rate

    @property
    def is_private(self) -> bool:
        """False when ε = ∞ (mode ``off``, σ = 0, or an event without noise)."""
        return self.config.adds_noise and all(k[2] > 0 for k in self.event_counts)

    @property
    def releases(self) -> int:
        """Releases composed for the most exposed user (the largest count over regions)."""
        per_region = self._per_region(self.event_counts)
        return max((sum(c for *_, c in events) for events in per_region.values()), default=0)

    def record_round(self, events: Sequence[ReleaseEvent] = ()) -> None:
        """Count one finished round and compose the releases the mechanism recorded in it."""
        self.rounds += 1
        for event in events:
            key = _key(event)
            self.event_counts[key] = self.event_counts.get(key, 0) + 1

    def note_unaccounted(self, what: str) -> None:
        """Record a data-dependent choice that ε does not cover (listed in ``privacy.json``)."""
        if what not in self.unaccounted:
            self.unaccounted.append(what)

    def record_ldp(self, epsilon_ldp: float, what: str, items_per_user: int = 1) -> None:
        """Record one ε_LDP-local-DP report (randomized response) for ``what``.

        A user who reports ``items_per_user`` items, each randomized on its own, spends
        ``items_per_user · ε_LDP`` by basic composition (the largest count over users is
        what is recorded), on top of the central (ε, δ); repeated reports add up.
        """
        if not (epsilon_ldp > 0.0 and math.isfinite(epsilon_ldp)):
            raise ConfigError(f"epsilon_ldp must be finite and > 0, got {epsilon_ldp}")
        if isinstance(items_per_user, bool) or int(items_per_user) != items_per_user \
                or items_per_user < 1:
            raise ConfigError(f"items_per_user must be an integer ≥ 1, got {items_per_user}")
        key = (str(what), float(epsilon_ldp))
        self._ldp[key] = self._ldp.get(key, 0) + int(items_per_user)

    def epsilon(self, accountant: Accountant = "pld",
                extra: Sequence[ReleaseEvent] = ()) -> float:
        """ε of the recorded events (plus ``extra`` ones, e.g. a round still to come);
        ``math.inf`` if any release had no noise; 0 when nothing was released."""
        _validate_accountant(accountant)
        counts = dict(self.event_counts)
        for event in extra:
            counts[_key(event)] = counts.get(_key(event), 0) + 1
        if not counts:
            return 0.0
        if not self.config.adds_noise or any(k[2] <= 0 for k in counts):
            return math.inf
        worst = 0.0
        for events in {tuple(sorted(v)) for v in self._per_region(counts).values()}:
            key = (events, accountant)
            if key not in self._cache:
                self._cache[key] = composed_epsilon(
                    [(q, sigma, n) for q, sigma, n in events], self.config.delta, accountant)
            worst = max(worst, self._cache[key])
        return worst

    def would_exceed(self, target_epsilon: float, upcoming: Sequence[ReleaseEvent],
                     accountant: Accountant = "pld") -> bool:
        """True if the ``upcoming`` releases would push ε above ``target_epsilon``."""
        return self.epsilon(accountant, upcoming) > target_epsilon

    @staticmethod
    def _per_region(counts: dict[EventKey, int]) -> dict[str, list[tuple[float, float, int]]]:
        """region → the (q, σ, count) compositions its users are exposed to."""
        merged: dict[str, dict[tuple[float, float], int]] = {}
        for (_, q, sigma, _, regions), n in counts.items():
            for region in regions:
                per = merged.setdefault(region, {})
                per[(q, sigma)] = per.get((q, sigma), 0) + n
        return {r: [(q, s, n) for (q, s), n in per.items()] for r, per in merged.items()}

    def events(self) -> list[dict[str, Any]]:
        """The composed events, JSON-ready (``privacy.json``'s ``events``)."""
        out = []
        for (what, q, sigma, vectors, regions), count in self.event_counts.items():
            out.append({
                "what": what,
                "event": "Gaussian" if q >= 1.0 else "PoissonSampled(Gaussian)",
                "sample_rate": q, "noise_multiplier": sigma, "vectors": vectors,
                "count": count, "regions": len(regions)})
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``privacy.json`` record (docs/privacy.md; JSON-ready; ε = ∞ is written as ``None``
        + a flag)."""
        private = self.is_private
        eps_pld = self.epsilon("pld") if private else None
        eps_rdp = self.epsilon("rdp") if private else None
        ldp = [
            {"what": what, "epsilon": eps, "releases": count, "epsilon_total": eps * count}
            for (what, eps), count in self._ldp.items()
        ]
        return {
            "mode": self.config.mode,
            "clip": self.config.clip,
            "sigma": self.config.sigma,
            "sample_rate": self.sample_rate,
            "accounting_sample_rate": self.accounting_sample_rate,
            "rounds": self.rounds,
            "releases": self.releases,
            "delta": self.config.delta,
            "epsilon_pld": eps_pld,
            "epsilon_rdp": eps_rdp,
            "epsilon_infinite": not private,
            "noise": self.noise_source,
            "accountant": {
                "library": "dp-accounting",
                "composition": "per region: Composed(SelfComposed(event, count)); "
                               "max over regions (parallel)",
                "neighboring_relation": "add_or_remove_one",
                "pld_value_discretization": PLD_VALUE_DISCRETIZATION,
            },
            "events": self.events(),
            "unaccounted": list(self.unaccounted),
            "ldp": ldp,
            "protects": self.protects,
        }

    @property
    def noise_source(self) -> str:
        """Where the noise came from: OS entropy, or a test seed (then not private)."""
        if not self.config.adds_noise:
            return "none"
        if self.config.noise_seed is not None:
            return f"{DETERMINISTIC_NOISE} (dp.noise_seed={self.config.noise_seed})"
        return "OS entropy"

    @property
    def protects(self) -> str:
        """A plain sentence of what the guarantee protects."""
        if not self.is_private:
            if self.config.mode == "off":
                return _PROTECTS["off"]
            return "nothing: σ = 0, so no noise is added (ε = ∞); updates are only clipped"
        sentence = _PROTECTS[self.config.mode]
        if self.config.noise_seed is not None:
            sentence = (f"nothing yet: {DETERMINISTIC_NOISE} (the noise is a function of "
                        f"dp.noise_seed). With OS-entropy noise it would protect {sentence}")
        for what in self.unaccounted:
            sentence = with_uncovered(sentence, what)
        return sentence


def with_uncovered(protects: str, what: str) -> str:
    """A ``protects`` sentence that also names ``what`` among the choices ε does not cover
    (``…; NOT covered: a; b``)."""
    marker = "; NOT covered: "
    return protects + ("; " if marker in protects else marker) + what


def _key(event: ReleaseEvent) -> EventKey:
    return (event.what, float(event.sample_rate), float(event.noise_multiplier),
            int(event.vectors), tuple(event.regions))
