"""FedRep (Collins, Hassani, Mokhtari & Shakkottai, 2021, "Exploiting Shared
Representations for Personalized Federated Learning", ICML; Algorithm 1).

Every client keeps its own head h_i on the device (initialised from the global head the
first time it participates). In a round a sampled client

1. updates its head for τ_h epochs with the received body φ^t frozen (Alg. 1 line 6);
2. updates the body for τ_b = E epochs with its new head frozen (line 8);
3. sends the body update; the server averages bodies (line 12).

A client is evaluated with the current global body and its own head.
"""

from __future__ import annotations

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, TrainInstruction
from regionfed.algorithms.body_head import SharedBodyStrategy
from regionfed.errors import ConfigError

HEAD_STREAM = "fedrep-head"


class FedRep(SharedBodyStrategy):
    name = "fedrep"
    evaluates_on_client = True

    def __init__(self, head_epochs: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        if head_epochs < 1:
            raise ConfigError(f"FedRep head_epochs must be >= 1, got {head_epochs}")
        self.head_epochs = int(head_epochs)

    def _with_own_head(self, body: torch.Tensor, client: ClientContext) -> torch.Tensor:
        head = client.state.get("head")
        return body if head is None else body.masked_scatter(self.head, head)

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        start = self._with_own_head(instruction.params, client)
        tuned, _ = client.train(start, epochs=self.head_epochs, trainable=self.head,
                                stream=HEAD_STREAM)
        new, loss = client.train(tuned, epochs=instruction.config.get("epochs"),
                                 trainable=~self.head)
        client.state["head"] = new[self.head].clone()  # only the head's entries are kept
        update = (instruction.params - new).masked_fill(self.head, 0.0)  # the body only
        return ClientResult(client.client_id, client.region, update, client.num_examples,
                            {"train_loss": loss})

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        return self._with_own_head(self.params, client)
