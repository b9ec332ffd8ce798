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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import DPConfig

if TYPE_CHECKING:
    import dp_accounting

# dp_accounting (and the scipy.signal it pulls in, ~1 s) is imported where ε is computed:
# a client process of the Flower runtimes imports this module but never accounts

__all__ = [
    "PLD_VALUE_DISCRETIZATION",
    "Accountant",
    "PrivacyLedger",
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
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    acc: dp_accounting.PrivacyAccountant
    if accountant == "pld":
        acc = PLDAccountant(value_discretization_interval=PLD_VALUE_DISCRETIZATION)
    else:
        acc = RdpAccountant()
    with _quiet_absl():
        acc.compose(dp_event(sigma, sample_rate, rounds))
        return float(acc.get_epsilon(delta))


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
    "user": ("one user's (client's) entire data, at (ε, δ) per the ledger, over all rounds; "
             "regions compose in parallel because every user belongs to exactly one region"),
    "region": ("one whole region's data (paper Alg. 2 clips the regional aggregate), not a "
               "single user specifically: a user's own contribution is not separately "
               "clipped, and the region is in every round, so ε is accounted with q = 1 "
               "(no amplification by client sampling)"),
    "off": "nothing: no differential privacy",
}


class PrivacyLedger:
    """What a run has spent (docs/privacy.md): mode, C, σ, q, rounds, δ, ε (PLD and RDP), LDP uses.

    ``user`` mode accounts ``releases`` compositions of the Poisson-subsampled Gaussian at
    rate q (normally one release per round). ``region`` mode accounts the same count of
    *un-sampled* Gaussian releases (q = 1): the protected unit is the region, and its
    regional aggregate is released every round. ``off`` mode, or σ = 0, has ε = ∞; the
    record then says ``epsilon_pld = epsilon_rdp = None`` and ``epsilon_infinite = True``.

    ε values are cached per number of releases (a PLD computation costs ~10–100 ms).
    """

    def __init__(self, config: DPConfig, sample_rate: float) -> None:
        if not isinstance(config, DPConfig):
            raise ConfigError(f"config must be a DPConfig, got {type(config).__name__}")
        _validate(config.sigma, sample_rate, 0, config.delta)
        self.config = config
        self.sample_rate = float(sample_rate)
        self.rounds = 0
        self.releases = 0
        self._ldp: dict[tuple[str, float], int] = {}
        self._cache: dict[tuple[int, str], float] = {}

    @property
    def accounting_sample_rate(self) -> float:
        """The q used by the accountant: the client rate in ``user`` mode, 1 in ``region``."""
        return 1.0 if self.config.mode == "region" else self.sample_rate

    @property
    def is_private(self) -> bool:
        """False when ε = ∞ (mode ``off`` or σ = 0)."""
        return self.config.adds_noise

    def record_round(self, releases: int = 1) -> None:
        """Count one finished round, with ``releases`` noisy regional releases per user.

        Normally 1. A strategy that publishes a second noised aggregate of the same users in
        a round (e.g. a separately aggregated meta-gradient) must pass 2, so that the
        composition is counted.
        """
        if isinstance(releases, bool) or int(releases) != releases or releases < 0:
            raise ConfigError(f"releases must be an integer ≥ 0, got {releases}")
        self.rounds += 1
        self.releases += int(releases)

    def record_ldp(self, epsilon_ldp: float, what: str) -> None:
        """Record one use of ε_LDP-local DP (randomized response) for ``what``.

        Repeated uses with the same (what, ε) are counted; by basic composition a user who
        reported n times has spent n·ε_LDP on top of the central (ε, δ).
        """
        if not (epsilon_ldp > 0.0 and math.isfinite(epsilon_ldp)):
            raise ConfigError(f"epsilon_ldp must be finite and > 0, got {epsilon_ldp}")
        key = (str(what), float(epsilon_ldp))
        self._ldp[key] = self._ldp.get(key, 0) + 1

    def epsilon(self, accountant: Accountant = "pld", releases: int | None = None) -> float:
        """ε after ``releases`` releases (default: those recorded); ``math.inf`` if not DP."""
        _validate_accountant(accountant)
        n = self.releases if releases is None else releases
        if n == 0:
            return 0.0
        if not self.is_private:
            return math.inf
        key = (int(n), accountant)
        if key not in self._cache:
            self._cache[key] = compute_epsilon(self.config.sigma, self.accounting_sample_rate,
                                               int(n), self.config.delta, accountant)
        return self._cache[key]

    def rounds_within_budget(self, target_epsilon: float, max_rounds: int,
                             accountant: Accountant = "pld") -> int:
        """Largest total number of releases ≤ ``max_rounds`` whose ε stays ≤ the target.

        With one release per round this is the number of rounds ``--target-epsilon`` allows.
        Not private (ε = ∞) → 0.
        """
        if not self.is_private:
            return 0
        return rounds_within_budget(target_epsilon, self.config.sigma,
                                    self.accounting_sample_rate, self.config.delta,
                                    max_rounds, accountant)

    def would_exceed(self, target_epsilon: float, releases: int = 1,
                     accountant: Accountant = "pld") -> bool:
        """True if ``releases`` more releases would push ε above ``target_epsilon``."""
        return self.epsilon(accountant, self.releases + releases) > target_epsilon

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
            "accountant": {
                "library": "dp-accounting",
                "event": ("Gaussian" if self.accounting_sample_rate >= 1.0
                          else "PoissonSampled(Gaussian)"),
                "neighboring_relation": "add_or_remove_one",
                "pld_value_discretization": PLD_VALUE_DISCRETIZATION,
            },
            "ldp": ldp,
            "protects": self.protects,
        }

    @property
    def protects(self) -> str:
        """A plain sentence of what the guarantee protects."""
        if not self.is_private:
            if self.config.mode == "off":
                return _PROTECTS["off"]
            return "nothing: σ = 0, so no noise is added (ε = ∞); updates are only clipped"
        return _PROTECTS[self.config.mode]
