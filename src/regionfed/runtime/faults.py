"""Client faults of the in-process simulator: dropouts, stragglers and rejected replies.

Each round, every client independently (a generator derived from the run's seed and the round,
so a resumed run sees the same faults):

* **drops out** with probability ``training.dropout``: it never answers that round;
* **straggles** with probability ``training.stragglers``: it computes (its private state
  advances) but answers after the round's deadline, so its replies are discarded.

Every reply that arrives is checked (:func:`rejection_reason`): an update of the wrong shape
or with NaN/Inf values, or a non-finite reported number, is rejected, counted in the round
log and logged — the strategy only ever aggregates finite, well-shaped updates. Rounds proceed
with whoever reported. DP stays correct: the user-level mean divides by the fixed expected
number of reporting clients q·(1 − dropout − stragglers)·n (any fixed denominator keeps the
sensitivity C/denominator), and the ledger accounts with the sampling rate q, not claiming
the extra amplification the faults would give.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import ClientResult

log = logging.getLogger("regionfed.faults")
FAULT_STREAM = 104729


@dataclass(frozen=True)
class RoundFaults:
    dropped: frozenset[str] = frozenset()
    late: frozenset[str] = frozenset()

    @property
    def absent(self) -> frozenset[str]:
        """Whose replies do not arrive in time this round."""
        return self.dropped | self.late


def round_faults(clients: list[str], dropout: float, stragglers: float, seed: int,
                 rnd: int) -> RoundFaults:
    """Which clients drop out and which straggle in round ``rnd`` (module docstring)."""
    if dropout == 0.0 and stragglers == 0.0:
        return RoundFaults()
    draws = np.random.default_rng([seed, rnd, FAULT_STREAM]).random(len(clients))
    dropped = frozenset(c for c, u in zip(clients, draws, strict=True) if u < dropout)
    late = frozenset(c for c, u in zip(clients, draws, strict=True)
                     if dropout <= u < dropout + stragglers)
    return RoundFaults(dropped, late)


def rejection_reason(result: ClientResult, dim: int) -> str | None:
    """Why a reply must not be aggregated, or ``None`` when it is fine."""
    update = result.update
    if update is not None:
        if not isinstance(update, torch.Tensor) or tuple(update.shape) != (dim,):
            shape = tuple(update.shape) if isinstance(update, torch.Tensor) else type(update)
            return f"update of shape {shape}, expected ({dim},)"
        if not bool(torch.isfinite(update).all()):
            return "update with NaN/Inf values"
    for key, value in result.metrics.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and \
                not bool(torch.isfinite(value).all()):
            return f"non-finite {key}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"non-finite {key}"
    return None


def log_rejection(client_id: str, rnd: int, reason: str) -> None:
    log.warning("round %d: rejected the reply of client %s: %s", rnd, client_id, reason)


def screen(result: ClientResult, dim: int, rnd: int, rejected: dict[str, str]) -> bool:
    """Whether ``result`` may be aggregated; a refused one is logged and recorded in
    ``rejected`` (client → reason). Every runtime screens replies through this."""
    reason = rejection_reason(result, dim)
    if reason is None:
        return True
    rejected[result.client_id] = reason
    log_rejection(result.client_id, rnd, reason)
    return False


def faults_log(faults: RoundFaults, rejected: dict[str, str]) -> dict[str, Any] | None:
    """The round log's ``faults`` entry, or ``None`` for a round without any."""
    if not (faults.dropped or faults.late or rejected):
        return None
    return {"dropped": len(faults.dropped), "late": len(faults.late),
            "rejected": dict(sorted(rejected.items()))}
