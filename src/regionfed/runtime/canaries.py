"""Canary clients for the privacy audit (:mod:`regionfed.audit`; Andrew et al., ICLR 2024).

A canary is a client with no data whose every training reply is one fixed direction: its
local "training" ends at θ_start − s·u, so the update it sends is Δ = s·u, with s = 2C (past
the clip norm, so the clipping step is exercised). Everything after the client step is the
run's real path — the strategy's client code, client-side clipping, Poisson sampling, the
private release and the ledger — because the canary is just one more client of the
federation. It holds no validation or test data, so it is never in a reported score.

A :class:`CanaryLayout` (which canaries are inserted, in which region, their directions'
seed and length) is all a runtime needs: the in-process simulator adds the clients to itself
(:func:`add_canaries`); on Flower each inserted canary is one more SuperNode, after the
federation's clients (partition-id ≥ the number of clients; ``runtime/flower/node.py``), whose
ClientApp runs the same strategy code on it as on any node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import FederationView
from regionfed.privacy.audit import canary_direction
from regionfed.runtime.params import num_parameters


class CanaryClient:
    """A :class:`~regionfed.algorithms.base.ClientContext` that always sends ``scale·u``."""

    def __init__(self, client_id: str, region: str, direction: torch.Tensor, scale: float,
                 num_classes: int, learning_rate: float, local_epochs: int,
                 index: int = -1) -> None:
        self.client_id = client_id
        self.index = index  # its place among a Flower run's nodes (after the real clients)
        self.region = region
        self.num_examples = 1
        self.state: dict[str, Any] = {}
        self.train_calls: dict[str, int] = {}  # what a Flower node saves between messages
        self.step = scale * direction
        self._num_classes = num_classes
        self._learning_rate = learning_rate
        self._local_epochs = local_epochs

    def train(self, start: torch.Tensor, *, epochs: int | None = None,
              extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
              stream: str = "main", trainable: torch.Tensor | None = None,
              mixing: tuple[float, torch.Tensor] | None = None,
              max_steps: int | None = None, repeatable: bool = False
              ) -> tuple[torch.Tensor, float]:
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

    def validation_leave_one_out(self, params: torch.Tensor) -> np.ndarray:
        return np.zeros(0)

    def labels(self) -> tuple[np.ndarray, int]:
        return np.zeros(0, dtype=np.int64), self._num_classes


@dataclass(frozen=True)
class CanaryLayout:
    """The inserted canaries of an audit: canary ``indices[k]`` sits in ``regions[k]``; its
    direction is ``canary_direction(seed, index, dim)`` and its raw update ``scale·u``."""

    seed: int
    indices: tuple[int, ...]
    regions: tuple[str, ...]
    scale: float

    def client_id(self, k: int) -> str:
        return f"canary/{self.indices[k]}"

    def client(self, k: int, dim: int, num_classes: int, training: Any,
               index: int = -1) -> CanaryClient:
        """The k-th inserted canary as a client of a model with ``dim`` parameters."""
        return CanaryClient(self.client_id(k), self.regions[k],
                            canary_direction(self.seed, self.indices[k], dim), self.scale,
                            num_classes, training.optimizer.lr, training.local_epochs, index)

    def to_json(self) -> str:
        """The layout as text (a Flower run-config value must be a scalar)."""
        return json.dumps({"seed": self.seed, "indices": list(self.indices),
                           "regions": list(self.regions), "scale": self.scale})

    @classmethod
    def from_json(cls, text: str) -> CanaryLayout:
        raw = json.loads(text)
        return cls(int(raw["seed"]), tuple(int(i) for i in raw["indices"]),
                   tuple(str(r) for r in raw["regions"]), float(raw["scale"]))


def add_canaries(simulator: Any, layout: CanaryLayout) -> list[str]:
    """Add the layout's canaries to an in-process simulator; returns their client ids. The
    strategy's view of the federation includes them (so they are sampled, clipped, noised
    and accounted like any client); the evaluator's does not."""
    dim = num_parameters(simulator.model)
    ids = []
    for k in range(len(layout.indices)):
        canary = layout.client(k, dim, simulator.task.num_classes, simulator.training)
        simulator.clients[canary.client_id] = canary
        ids.append(canary.client_id)
    view: FederationView = simulator.view
    simulator.view = replace(
        view, client_region={**view.client_region,
                             **dict(zip(ids, layout.regions, strict=True))},
        num_examples={**view.num_examples, **dict.fromkeys(ids, 1)})
    return ids
