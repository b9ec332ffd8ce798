"""APFL (Deng, Kamani & Mahdavi, 2020, "Adaptive Personalized Federated Learning",
Algorithm 1).

Each client keeps a local model v_i and a mixing weight α_i on the device; its personalised
model is the mixture  v̄_i = α_i·v_i + (1 − α_i)·w  (paper Eq. 3). In a round a sampled client

1. updates the global model as FedAvg does (E local epochs on f_i from w^t), sends Δ;
2. updates v_i by E local epochs on f_i(α_i·v + (1 − α_i)·w^t), i.e. with the gradient
   ∇_v = α_i·∇f_i(v̄_i) (Alg. 1 line 7; the model computes with the mixture);
3. with ``adaptive``, takes one projected step on α_i (Eq. 10):
   α_i ← clip(α_i − η_α·⟨v_i − w^t, ∇f_i(v̄_i)⟩, 0, 1).

Deviations (stated, not hidden): the paper interleaves the w, v and α steps within every
local iteration with the *current* local w; here each is a sequence of epochs with w^t as
the mixture partner, and α moves once per round with step η_α (default: η_l·K, the summed
step of the paper's K per-iteration updates). With α = 0 and ``adaptive`` off the
personalised model is exactly the FedAvg global model.
"""

from __future__ import annotations

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, TrainInstruction
from regionfed.algorithms.fedavg import FedAvg
from regionfed.errors import ConfigError

#: v_i's own shuffling stream (the global update keeps FedAvg's batches)
PERSONAL_STREAM = "apfl-personal"


class APFL(FedAvg):
    name = "apfl"
    evaluates_on_client = True

    def __init__(self, alpha: float = 0.25, adaptive: bool = True,
                 alpha_lr: float | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"APFL alpha must be in [0, 1], got {alpha}")
        if alpha_lr is not None and not alpha_lr > 0:
            raise ConfigError(f"APFL alpha_lr must be > 0, got {alpha_lr}")
        self.alpha = float(alpha)
        self.adaptive = bool(adaptive)
        self.alpha_lr = alpha_lr

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        result = self.train_and_report(instruction, client)
        w = instruction.params
        alpha = client.state.get("alpha", self.alpha)
        v = client.state.get("v", w)  # v_i^0 = the first global model the client sees
        epochs = instruction.config.get("epochs")
        if alpha > 0.0:
            v, _ = client.train(v, epochs=epochs, mixing=(alpha, (1.0 - alpha) * w),
                                stream=PERSONAL_STREAM)
        if self.adaptive:
            mixture = alpha * v + (1.0 - alpha) * w
            slope = float(torch.dot(v - w, client.gradient(mixture)))  # ∂f/∂α at v̄_i
            steps = (epochs or client.local_epochs) * client.steps_per_epoch()
            lr = self.alpha_lr if self.alpha_lr is not None else client.learning_rate * steps
            alpha = min(1.0, max(0.0, alpha - lr * slope))
        client.state["v"], client.state["alpha"] = v, alpha
        result.metrics["alpha"] = alpha
        return result

    def aggregate_train(self, rnd, results):
        log = super().aggregate_train(rnd, results)
        if results:
            log["alpha_mean"] = float(sum(r.metrics["alpha"] for r in results) / len(results))
        return log

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        """v̄_i = α_i·v_i + (1 − α_i)·w with the current global w."""
        if "v" not in client.state:
            return self.params
        alpha = client.state["alpha"]
        if alpha == 0.0:
            return self.params
        return alpha * client.state["v"] + (1.0 - alpha) * self.params
