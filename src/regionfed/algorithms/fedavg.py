"""FedAvg (McMahan et al., 2017, Algorithm 1 "FederatedAveraging").

Clients run E local epochs from θ^t and send Δ_u = θ^t − θ_u; the server applies the
data-size-weighted mean: θ^{t+1} = θ^t − η_g Σ_u (n_u / n) Δ_u (η_g = 1 is plain FedAvg).
"""

from __future__ import annotations

from typing import Any

from regionfed.algorithms.base import ClientResult, Strategy, weighted_mean


class FedAvg(Strategy):
    name = "fedavg"

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        if not results:
            return {"clients": 0}
        update = weighted_mean(results)
        self.params = self.params - self.server_lr * update
        return {"clients": len(results), "update_norm": float(update.norm())}
