"""FedBABU (Oh, Kim & Yun, 2022, "FedBABU: Towards Enhanced Representation for Federated
Image Classification", ICLR; Algorithm 1).

During federated training the head stays at its random initialisation for everyone
("Body Aggregation and Body Update"): clients train the body only (head frozen) and the
server averages the bodies as FedAvg does. After training each client personalises by
fine-tuning the whole model (body and head) on its own training data for τ epochs
(paper §4.2, "fine-tuning"), and is evaluated with that model. The fine-tuned model is
computed whenever a client is evaluated (from the current global model), so every
evaluation reports the personalised models the paper's protocol would give at that point.
"""

from __future__ import annotations

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, TrainInstruction
from regionfed.algorithms.body_head import SharedBodyStrategy
from regionfed.errors import ConfigError

#: the fine-tuning draws its own batches (it must not shift the federated stream)
FINETUNE_STREAM = "fedbabu-finetune"


class FedBABU(SharedBodyStrategy):
    name = "fedbabu"
    evaluates_on_client = True

    def __init__(self, finetune_epochs: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        if finetune_epochs < 0:
            raise ConfigError(f"FedBABU finetune_epochs must be >= 0, got {finetune_epochs}")
        self.finetune_epochs = int(finetune_epochs)
        self.version = 0  # bumps whenever the global model changes

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        return self.train_and_report(instruction, client, trainable=~self.head)

    def aggregate_train(self, rnd, results):
        self.version += 1
        return super().aggregate_train(rnd, results)

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        """The client's fine-tuned model (whole network, ``finetune_epochs`` epochs)."""
        if self.finetune_epochs == 0:
            return self.params
        cached = client.state.get("finetuned")
        if cached is None or cached[0] != self.version:
            tuned, _ = client.train(self.params, epochs=self.finetune_epochs,
                                    stream=FINETUNE_STREAM, repeatable=True)
            cached = client.state["finetuned"] = (self.version, tuned)
        return cached[1]
