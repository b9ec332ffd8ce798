"""FedProx (Li et al., 2020, "Federated Optimization in Heterogeneous Networks", Alg. 2).

Identical to FedAvg except for the client objective: client k approximately minimises

    h_k(w; w^t) = F_k(w) + (μ/2)·‖w − w^t‖²          (paper Eq. 2)

starting from the global model w^t; the server averages as in FedAvg. μ = 0 is FedAvg.
The proximal term is added to the client's mini-batch loss at every local step.
"""

from __future__ import annotations

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, Proximal, TrainInstruction
from regionfed.algorithms.fedavg import FedAvg
from regionfed.errors import ConfigError


def proximal_term(anchor: torch.Tensor, mu: float) -> Proximal:
    """``model ↦ (μ/2)·‖θ(model) − anchor‖²`` over all parameters (flat order)."""
    return Proximal(anchor, mu)


class FedProx(FedAvg):
    name = "fedprox"

    def __init__(self, mu: float = 0.01, **kwargs) -> None:
        super().__init__(**kwargs)
        if not mu >= 0.0:
            raise ConfigError(f"FedProx mu must be >= 0, got {mu}")
        self.mu = float(mu)

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        if self.mu == 0.0:  # exactly FedAvg's client step
            return self.train_and_report(instruction, client)
        return self.train_and_report(
            instruction, client, extra_loss=proximal_term(instruction.params.detach(), self.mu))
