"""Differential privacy: clipping and the regional Gaussian mechanism (paper Alg. 2),
accounting with ``dp-accounting`` and the privacy ledger (docs/privacy.md), and k-ary randomized
response for the intent histograms of the ``dynamic`` strategy."""

from regionfed.privacy.ledger import (
    PLD_VALUE_DISCRETIZATION,
    PrivacyLedger,
    compute_epsilon,
    dp_event,
    epsilon_pld,
    epsilon_rdp,
    rounds_within_budget,
    sigma_for_epsilon,
)
from regionfed.privacy.mechanism import (
    DPConfig,
    clip_update,
    noise_std_of_mean,
    regional_aggregate,
)
from regionfed.privacy.randomized_response import (
    debiased_distribution,
    keep_probability,
    kl_divergence,
    privatized_histogram,
    randomize,
)

__all__ = [
    "PLD_VALUE_DISCRETIZATION",
    "DPConfig",
    "PrivacyLedger",
    "clip_update",
    "compute_epsilon",
    "debiased_distribution",
    "dp_event",
    "epsilon_pld",
    "epsilon_rdp",
    "keep_probability",
    "kl_divergence",
    "noise_std_of_mean",
    "privatized_histogram",
    "randomize",
    "regional_aggregate",
    "rounds_within_budget",
    "sigma_for_epsilon",
]
