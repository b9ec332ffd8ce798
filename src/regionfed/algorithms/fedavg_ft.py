"""FedAvg-FT: FedAvg, then each client fine-tunes the global model on its own data before it
is evaluated (local adaptation; Yu, Bagdasaryan & Shmatikov, 2020, "Salvaging Federated
Learning by Local Adaptation"; the "FedAvg + FT" baseline of Oh et al., 2022, §4.2).

Training is FedAvg's (DP-FedAvg under DP). At an evaluation, client u fine-tunes θ for
``finetune_epochs`` epochs on F_u (its own training data, its own shuffling stream; the
result is not kept) and is evaluated with the fine-tuned model v_u unless θ beats v_u on the
client's own validation split by ``choice_margin`` standard errors — the on-device choice of
``regionfed-plus`` with ``regionfed_plus.personal_refresh_epochs`` (there v_u starts from
the regional model θ_r) under its ``choice_rule: margin``. plus's default bar (κ·SE²) was
chosen for where a kept personal model competes with the refreshed one; fedavg-ft keeps no
personal model. Nothing leaves the device: no privacy cost. With both methods at the same
number of epochs, the difference between them is what the regions add.
"""

from __future__ import annotations

from typing import Any

import torch

from regionfed.algorithms.base import ClientContext
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.on_device import choice_counts, choose_on_validation
from regionfed.errors import ConfigError

#: the fine-tuning draws its own batches (it must not shift the federated stream)
FINETUNE_STREAM = "fedavg-ft-finetune"
#: the fine-tuned model is the default; the global one must beat it by the margin
ORDER = ("finetuned", "global")


class FedAvgFT(FedAvg):
    name = "fedavg-ft"
    evaluates_on_client = True

    def __init__(self, finetune_epochs: int = 8, choice_margin: float = 0.5,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if finetune_epochs < 1:
            raise ConfigError(f"fedavg-ft finetune_epochs must be >= 1, got {finetune_epochs}")
        if not choice_margin >= 0.0:
            raise ConfigError(f"fedavg-ft choice_margin must be >= 0, got {choice_margin}")
        self.finetune_epochs = int(finetune_epochs)
        self.choice_margin = float(choice_margin)
        #: client → the candidate (:data:`ORDER`) it was last evaluated with
        self.choices: dict[str, str] = {}

    def eval_params(self, client_id: str, region: str, client: ClientContext | None
                    ) -> torch.Tensor:
        if client is None:
            return self.params
        tuned, _ = client.train(self.params, epochs=self.finetune_epochs,
                                stream=FINETUNE_STREAM, repeatable=True)
        candidates = {"finetuned": tuned, "global": self.params}
        choice = choose_on_validation(candidates, client, self.choice_margin, ORDER)
        self.choices[client_id] = choice
        return candidates[choice]

    def evaluation_diagnostics(self) -> dict[str, Any]:
        """Per region, how many clients were last evaluated with each candidate."""
        return choice_counts(self.choices, self.view, ORDER)
