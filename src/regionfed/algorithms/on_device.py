"""What a client decides on its own device, from its own validation split (no privacy cost:
nothing leaves the device): which of several candidate models it is evaluated with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import ClientContext, FederationView


def choose_on_validation(candidates: dict[str, torch.Tensor], client: ClientContext,
                         margin: float = 0.0, order: tuple[str, ...] | None = None,
                         peers: int = 1) -> str:
    """The candidate with the best validation score on the client's own split, where any
    candidate other than the default must beat the default's score s₀ by ``margin``
    standard errors √(s₀(1 − s₀)/n) of it (ties: ``order``, which defaults to the
    candidates' own order). The default is the best-scoring of the first ``peers``
    candidates of ``order`` present (no margin among them; ties: ``order``) — with
    ``peers=1`` simply the first; the first when the client has no validation data."""
    if peers < 1:
        raise ValueError(f"peers must be >= 1, got {peers}")
    order = tuple(candidates) if order is None else order
    present = [name for name in order if name in candidates]
    score_sum, count = client.validation_score(candidates[present[0]])
    if not count:
        return present[0]
    scores = {present[0]: score_sum / count}
    for name in present[1:]:
        score_sum, _ = client.validation_score(candidates[name])
        scores[name] = score_sum / count
    default = max(present[:peers], key=scores.__getitem__)  # max keeps the first of ties
    challengers = [name for name in present if name != default]
    s0 = min(max(scores[default], 0.0), 1.0)
    bar = scores[default] + margin * float(np.sqrt(s0 * (1.0 - s0) / count))
    best = default
    for name in challengers:
        beats_default = scores[name] > scores[default] and scores[name] >= bar
        if beats_default and (best == default or scores[name] > scores[best]):
            best = name
    return best


def choice_counts(choices: dict[str, str], view: FederationView, names: Sequence[str]
                  ) -> dict[str, Any]:
    """The evaluation diagnostic of an on-device choice: per region, how many clients were
    last evaluated with each of ``names`` (``{}`` before any evaluation)."""
    if not choices:
        return {}
    counts = {r: dict.fromkeys(names, 0) for r in view.regions}
    for client_id, choice in choices.items():
        counts[view.client_region[client_id]][choice] += 1
    return {"choices": counts}
