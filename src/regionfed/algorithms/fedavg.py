"""FedAvg (McMahan et al., 2017, Algorithm 1 "FederatedAveraging").

Clients run E local epochs from θ^t and send Δ_u = θ^t − θ_u; the server applies the
data-size-weighted mean: θ^{t+1} = θ^t − η_g Σ_u (n_u / n) Δ_u (η_g = 1 is plain FedAvg).
With user-level DP this is DP-FedAvg (McMahan et al., 2018): each Δ_u clipped to C, one
Gaussian N(0, σ²C²) on the sum over *all* sampled clients, divided by q·N.
"""

from __future__ import annotations

from typing import Any

import torch

from regionfed.algorithms.base import ClientResult, SingleExchangeStrategy


class FedAvg(SingleExchangeStrategy):
    name = "fedavg"
    secure_aggregation = True  # without DP, the data-weighted mean of the updates

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        update = self.private_mean(results, self.sample_rate * len(self.view.clients))
        if update is None:
            return {"clients": 0}
        update = self.shared_update(update)
        self.params = self.params - self.server_lr * update
        return {"clients": len(results), "update_norm": float(update.norm())}

    def shared_update(self, update: torch.Tensor) -> torch.Tensor:
        """The part of the aggregated update the global model takes (all of it here)."""
        return update
