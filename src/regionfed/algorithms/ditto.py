"""Ditto (Li et al., 2021, "Ditto: Fair and Robust Federated Learning Through
Personalization", Algorithm 1).

Every round a sampled client k

1. updates the global model as in FedAvg: E local epochs on F_k from w^t, sends Δ_k;
2. updates its personal model v_k (kept on the device, never sent) by E local epochs on

       h_k(v; w^t) = F_k(v) + (λ/2)·‖v − w^t‖²          (paper Eq. 2, the personal objective)

   starting from its previous v_k (v_k = w^0 before its first round).

The server aggregates the global updates as FedAvg does; each client is evaluated with its
personal model v_k. λ = 0 is local training; λ → ∞ pins v_k to the global model.
"""

from __future__ import annotations

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, TrainInstruction
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.fedprox import proximal_term
from regionfed.errors import ConfigError

#: the shuffling stream of the global-model update; the personal model trains on the main
#: stream, so with λ = 0 it sees exactly the batches ``local`` would
GLOBAL_STREAM = "ditto-global"


class Ditto(FedAvg):
    name = "ditto"
    evaluates_on_client = True

    def __init__(self, lam: float = 0.1, **kwargs) -> None:
        super().__init__(**kwargs)
        if not lam >= 0.0:
            raise ConfigError(f"Ditto lambda must be >= 0, got {lam}")
        self.lam = float(lam)

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        result = self.train_and_report(instruction, client, stream=GLOBAL_STREAM)
        personal = client.state.get("personal", instruction.params)
        extra = proximal_term(instruction.params.detach(), self.lam) if self.lam > 0 else None
        client.state["personal"], _ = client.train(
            personal, epochs=instruction.config.get("epochs"), extra_loss=extra)
        return result

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        return client.state.get("personal", self.params)
