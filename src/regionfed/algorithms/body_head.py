"""Body/head splits shared by FedBABU and FedRep: only the body is federated.

Which entries are the head is the model's own declaration (``head`` in
:attr:`FederationView.parameter_groups`); a model that declares none can't run these
methods (:class:`~regionfed.errors.MethodNotApplicableError`).
"""

from __future__ import annotations

import numpy as np
import torch

from regionfed.algorithms.base import FederationView
from regionfed.algorithms.fedavg import FedAvg


class SharedBodyStrategy(FedAvg):
    """FedAvg over the body only: the server's head entries never change.

    Clients reply zero head updates; the aggregate's head entries (which under DP would
    carry Gaussian noise) are discarded too — post-processing, so the privacy accounting is
    unchanged — so the global head stays exactly as initialised.
    """

    head: torch.Tensor  # bool mask over the flat vector

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        super().setup(init_params, view, rng)
        self.head = view.group_mask("head", init_params.numel())

    def shared_update(self, update: torch.Tensor) -> torch.Tensor:
        return update.masked_fill(self.head, 0.0)
