"""pFedMe (T. Dinh, Tran & Nguyen, 2020, "Personalized Federated Learning with Moreau
Envelopes", NeurIPS; Algorithm 1).

The global problem is min_w Σ_i (n_i/n) F_i(w) with each client's Moreau envelope

    F_i(w) = min_θ f_i(θ) + (λ/2)·‖θ − w‖²                          (paper Eq. 2–3)

whose minimiser θ̂_i(w) is the client's personalised model. In a round a sampled client i

1. receives w^t and sets its local model w_i ← w^t                        (Alg. 1 line 5);
2. for R local rounds (lines 6–9):

   a. approximately solves the personalised problem
      θ̃_i ≈ argmin_θ f_i(θ) + (λ/2)·‖θ − w_i‖²                           (line 7)
      with K optimizer steps of the client's configured optimizer on the loss plus
      :func:`~regionfed.algorithms.fedprox.proximal_term` (w_i, λ), starting from w_i in the
      first local round and from the previous θ̃_i afterwards (as the authors' code, which
      keeps the personal model across local rounds and resets it to w^t each round). The
      paper takes its K steps on one sampled mini-batch; here they are K mini-batch steps on
      fresh batches of the ``pfedme-personal`` shuffling stream, and each solve starts a fresh
      optimizer (no AdamW moments carried between solves);
   b. w_i ← w_i − η·λ·(w_i − θ̃_i)                                          (line 8),
      a gradient step of size η on F_i, whose gradient is λ(w_i − θ̂_i(w_i)); 0 < η·λ ≤ 1
      keeps w_i between its old value and θ̃_i. Default η = 1/λ: the paper's η = 0.005
      (η·λ = 0.075) relies on its R = 20 local rounds; with the budget-matched R below
      (often 1) a small η·λ leaves the global model almost still (measured in
      docs/baselines.md);

3. sends Δ_i = w^t − w_i (the repository's Δ = start − end) and keeps the last θ̃_i on the
   device as its personal model, the one it is evaluated with.

The server (line 11) sets w^{t+1} = (1 − β)·w^t + β·mean_i(w_i) = w^t − β·mean_i(Δ_i), the
mean taken by :meth:`Strategy.private_mean` (so DP clips and noises Δ_i as in DP-FedAvg); β
multiplies the run's ``server_lr`` (1 by default, so β alone is the paper's step).

Budget: R = max(1, ⌈E·S/K⌉) local rounds, with S the client's ``steps_per_epoch()`` and E
the local epochs, so a client takes about as many optimizer steps (R·K ≈ E·S) as a FedAvg
client does in E epochs (the paper uses a fixed R = 20). E is ``config["epochs"]`` of the
instruction when the strategy sets it, else the client's configured ``local_epochs``. Each
solve runs ⌈K/S⌉ epochs capped at K steps, so it takes
K steps even when the client has fewer than K batches.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from regionfed.algorithms.base import ClientContext, ClientResult, TrainInstruction
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.fedprox import proximal_term
from regionfed.errors import ConfigError

#: the shuffling stream of the inner (personalised) solves
PERSONAL_STREAM = "pfedme-personal"


class PFedMe(FedAvg):
    name = "pfedme"
    evaluates_on_client = True

    def __init__(self, lam: float = 15.0, inner_steps: int = 5, eta: float | None = None,
                 beta: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not lam > 0.0 or not math.isfinite(lam):
            raise ConfigError(f"pFedMe lambda must be finite and > 0, got {lam}")
        if isinstance(inner_steps, bool) or int(inner_steps) != inner_steps or inner_steps < 1:
            raise ConfigError(f"pFedMe inner_steps K must be an integer >= 1, got {inner_steps}")
        if eta is None:  # η·λ = 1: with R ≈ 1 local round, w_i moves the whole way to θ̃_i
            eta = 1.0 / lam if lam > 0 else 1.0
        if not 0.0 < eta * lam <= 1.0:
            raise ConfigError(f"pFedMe needs 0 < eta·lambda <= 1 (the local-model step of Alg. 1 "
                              f"line 8), got eta={eta}, lambda={lam}: eta·lambda={eta * lam}")
        if not beta > 0.0 or not math.isfinite(beta):
            raise ConfigError(f"pFedMe beta must be finite and > 0, got {beta}")
        self.lam = float(lam)
        self.inner_steps = int(inner_steps)
        self.eta = float(eta)
        self.beta = float(beta)

    def local_rounds(self, epochs: int, steps_per_epoch: int) -> int:
        """R = max(1, ⌈E·S/K⌉): about E epochs' worth of optimizer steps."""
        return max(1, -(-epochs * steps_per_epoch // self.inner_steps))

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        start = instruction.params.detach()
        per_epoch = client.steps_per_epoch()
        epochs = instruction.config.get("epochs") or client.local_epochs
        rounds = self.local_rounds(epochs, per_epoch)
        solve_epochs = max(1, -(-self.inner_steps // max(per_epoch, 1)))  # ⌈K/S⌉
        local, personal = start.clone(), start
        losses = []
        for _ in range(rounds):
            personal, loss = client.train(personal, epochs=solve_epochs,
                                          max_steps=self.inner_steps,
                                          extra_loss=proximal_term(local, self.lam),
                                          stream=PERSONAL_STREAM)
            local = local - self.eta * self.lam * (local - personal)
            losses.append(loss)
        client.state["personal"] = personal
        return ClientResult(client.client_id, client.region, start - local, client.num_examples,
                            {"train_loss": sum(losses) / len(losses), "local_rounds": rounds})

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        update = self.private_mean(results, self.sample_rate * len(self.view.clients))
        if update is None:
            return {"clients": 0}
        self.params = self.params - self.server_lr * self.beta * update
        return {"clients": len(results), "update_norm": float(update.norm())}

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        return client.state.get("personal", self.params)
