"""``local``: every client trains alone from the shared initialisation (no communication).

Each client keeps its own model in its private state and trains it E epochs per round, so the
compute budget matches the federated methods; it is evaluated on its own test data.
"""

from __future__ import annotations

from typing import Any

import torch

from regionfed.algorithms.base import (
    ClientContext,
    ClientResult,
    SingleExchangeStrategy,
    TrainInstruction,
)


class LocalOnly(SingleExchangeStrategy):
    name = "local"
    evaluates_on_client = True
    shares_updates = False  # nothing leaves the device

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        start = client.state.get("params", instruction.params)
        new, loss = client.train(start)
        client.state["params"] = new
        return ClientResult(client.client_id, client.region, None, client.num_examples,
                            {"train_loss": loss})

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        return {"clients": len(results)}

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        return client.state.get("params", self.params)
