"""The strategy protocol: transport-free federated algorithms (SPEC §2).

A strategy is pure steps over its own state and messages, so the in-process simulator and a
distributed runtime (Flower) can drive the same object:

1. ``configure_train(round)`` → one :class:`TrainInstruction` per sampled client;
2. ``client_train(instruction, client)`` runs *on the client* with a :class:`ClientContext`
   the runtime supplies (local data access, persistent private client state) and returns a
   :class:`ClientResult` whose ``update`` is the pseudo-gradient Δ_u = θ_start − θ_end;
3. ``aggregate_train(round, results)`` updates the server/regional state and returns a log;
4. ``eval_params(client)`` names the model a client is evaluated with (global, regional or
   personal), so personalised methods are scored on each client's own test data.

Strategies see flat parameter vectors only, never a model or a dataset.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from regionfed.errors import NumericalError


@dataclass(frozen=True)
class FederationView:
    """What a server legitimately knows: regions, client membership and training-set sizes."""

    regions: tuple[str, ...]
    client_region: dict[str, str]
    num_examples: dict[str, int]

    def clients_in(self, region: str) -> list[str]:
        return [c for c, r in self.client_region.items() if r == region]

    @property
    def clients(self) -> list[str]:
        return list(self.client_region)


@dataclass
class TrainInstruction:
    client_id: str
    region: str
    params: torch.Tensor
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClientResult:
    client_id: str
    region: str
    update: torch.Tensor | None
    num_examples: int
    metrics: dict[str, float] = field(default_factory=dict)


class ClientContext(Protocol):
    """A client as seen by strategy code running on it (supplied by the runtime)."""

    client_id: str
    region: str
    num_examples: int
    state: dict[str, Any]  # persistent across rounds, private to the client, never sent

    def train(self, start: torch.Tensor, *, epochs: int | None = None,
              extra_loss: Callable[[torch.nn.Module], torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, float]:
        """Local training from ``start``; returns (new params, mean training loss)."""
        ...


def check_finite(update: torch.Tensor, who: str) -> None:
    """Reject NaN/inf updates before they reach any aggregate."""
    if not torch.isfinite(update).all():
        raise NumericalError(f"non-finite values (NaN/inf) in the update from {who}")


class Strategy(ABC):
    """Base class: Poisson client sampling, default local training and evaluation model."""

    name: str = "strategy"

    def __init__(self, sample_rate: float = 1.0, server_lr: float = 1.0) -> None:
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        self.sample_rate = sample_rate
        self.server_lr = server_lr
        self.params: torch.Tensor = torch.zeros(0)
        self.view: FederationView | None = None
        self.rng = np.random.default_rng(0)

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        self.params = init_params.clone()
        self.view = view
        self.rng = rng

    def sample_clients(self, rnd: int) -> list[str]:
        """Poisson sampling: each client independently with probability ``sample_rate``."""
        clients = self.view.clients
        if self.sample_rate >= 1.0:
            return clients
        keep = self.rng.random(len(clients)) < self.sample_rate
        return [c for c, k in zip(clients, keep, strict=True) if k]

    def configure_train(self, rnd: int) -> list[TrainInstruction]:
        return [TrainInstruction(c, self.view.client_region[c], self.params)
                for c in self.sample_clients(rnd)]

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        """Default client step: local training from the received model, send Δ_u."""
        new, loss = client.train(instruction.params)
        return ClientResult(client.client_id, client.region, instruction.params - new,
                            client.num_examples, {"train_loss": loss})

    @abstractmethod
    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        """Fold the round's client results into the strategy state; return a round log."""

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        """The parameters ``client_id`` is evaluated with (default: the global model)."""
        return self.params


def weighted_mean(results: list[ClientResult]) -> torch.Tensor:
    """Σ_u n_u Δ_u / Σ_u n_u over the results' updates (FedAvg's data-size weights)."""
    total = sum(r.num_examples for r in results)
    out = torch.zeros_like(results[0].update)
    for r in results:
        out.add_(r.update, alpha=r.num_examples / total)
    return out
