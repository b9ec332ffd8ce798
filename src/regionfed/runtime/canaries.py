"""Canary clients for the privacy audit (:mod:`regionfed.audit`; Andrew et al., ICLR 2024).

A canary is a client with no data whose every training reply is one fixed direction: its
local "training" ends at θ_start − s·u, so the update it sends is Δ = s·u, with s = 2C (past
the clip norm, so the clipping step is exercised). Everything after the client step is the
run's real path — the strategy's client code, client-side clipping, Poisson sampling, the
private release and the ledger — because the canary is just one more client of the
federation. It holds no validation or test data, so it is never in a reported score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import FederationView
from regionfed.privacy.audit import canary_direction


class CanaryClient:
    """A :class:`~regionfed.algorithms.base.ClientContext` that always sends ``scale·u``."""

    def __init__(self, client_id: str, region: str, direction: torch.Tensor, scale: float,
                 num_classes: int, learning_rate: float, local_epochs: int) -> None:
        self.client_id = client_id
        self.region = region
        self.num_examples = 1
        self.state: dict[str, Any] = {}
        self.step = scale * direction
        self._num_classes = num_classes
        self._learning_rate = learning_rate
        self._local_epochs = local_epochs

    def train(self, start: torch.Tensor, *, epochs: int | None = None,
              extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
              stream: str = "main", trainable: torch.Tensor | None = None,
              mixing: tuple[float, torch.Tensor] | None = None,
              max_steps: int | None = None) -> tuple[torch.Tensor, float]:
        return start - self.step.to(start.dtype), 0.0

    def steps_per_epoch(self) -> int:
        return 1

    @property
    def local_epochs(self) -> int:
        return self._local_epochs

    @property
    def learning_rate(self) -> float:
        return self._learning_rate

    def gradient(self, params: torch.Tensor) -> torch.Tensor:
        return self.step.to(params.dtype).clone()

    def validation_loss(self, params: torch.Tensor) -> tuple[float, int]:
        return 0.0, 0

    def validation_score(self, params: torch.Tensor) -> tuple[float, int]:
        return 0.0, 0

    def labels(self) -> tuple[np.ndarray, int]:
        return np.zeros(0, dtype=np.int64), self._num_classes


def add_canaries(simulator: Any, seed: int, indices: Sequence[int], regions: Sequence[str],
                 scale: float) -> list[str]:
    """Add canary ``indices`` (directions from ``seed``) to an in-process simulator, canary
    i in ``regions[k]``; returns their client ids. The strategy's view of the federation
    includes them (so they are sampled, clipped, noised and accounted like any client);
    the evaluator's does not."""
    dim = int(sum(p.numel() for p in simulator.model.parameters()))
    some_client = next(iter(simulator.clients.values()))
    num_classes = int(some_client.labels()[1])
    training = simulator.training
    ids = []
    for index, region in zip(indices, regions, strict=True):
        client_id = f"canary/{index}"
        simulator.clients[client_id] = CanaryClient(
            client_id, region, canary_direction(seed, index, dim), scale, num_classes,
            training.optimizer.lr, training.local_epochs)
        ids.append(client_id)
    view: FederationView = simulator.view
    simulator.view = replace(
        view, client_region={**view.client_region, **dict(zip(ids, regions, strict=True))},
        num_examples={**view.num_examples, **dict.fromkeys(ids, 1)})
    return ids
