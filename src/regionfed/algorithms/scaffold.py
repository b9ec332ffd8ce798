"""SCAFFOLD (Karimireddy et al., 2020, "SCAFFOLD: Stochastic Controlled Averaging for
Federated Learning", ICML; Algorithm 1 with control-variate option II).

The server keeps the model x and a control variate c; every client keeps its own control
variate c_i on the device (c = c_i = 0 before anything was learned). In a round a sampled
client i

1. receives (x, c) and sets y ← x;
2. takes K local steps y ← y − η_l (g_i(y) − c_i + c)                      (Alg. 1 line 10);
   here the correction is the ``extra_loss`` ⟨θ − x, c − c_i⟩, whose gradient is c − c_i,
   added to every mini-batch loss (the constant ⟨x, c − c_i⟩ is subtracted only so the
   logged training loss stays the task loss at the start);
3. updates its control variate with option II                               (line 12):

       c_i⁺ = c_i − c + (x − y) / (K η_l),

   with η_l the client optimizer's learning rate and K the number of local steps it took;
4. sends Δy_i = x − y (the repository's Δ = start − end) and Δc_i = c_i⁺ − c_i (line 13).

The server applies                                                          (lines 16–17)

    x ← x − η_g · mean_{i∈S}(Δy_i),        c ← c + Σ_{i∈S} w_i Δc_i

(the paper: w_i = 1/N, i.e. c ← c + (|S|/N)·mean_{i∈S}(Δc_i); the weights here follow below).

Both means are ONE joint release of the strategy's mechanism
(:meth:`~regionfed.privacy.releases.PrivateReleases.joint_mean`): Δc_i depends on the client's
data as much as Δy_i does, and both come from the same Poisson sample, so the pair — each
clipped to C, each given N(0, σ²C²·I) — is one Gaussian mechanism with sensitivity √2·C,
i.e. noise multiplier σ/√2 per round (not two independent releases at σ). The server keeps
c = Σ_i w_i c_i with the weights of the model update's mean:

* ``user`` mode (uniform, like DP-FedAvg's x update): each Δc_i is clipped to the same C and
  summed over the fixed denominator q·N; × q gives (1/N) Σ_{i∈S} clip(Δc_i) (+ noise), the
  paper's update exactly, up to clipping and noise;
* ``off`` / ``region`` mode (data-size weighted, like FedAvg's x update): the mean over S
  × Σ_{i∈S} n_i / n gives Σ_{i∈S} (n_i/n) Δc_i, so c = Σ_i (n_i/n) c_i, the control variate
  of the data-size-weighted objective FedAvg optimises. (The paper's (1/N) Σ c_i assumes
  equal weights; with unequal ones a uniform c would move the fixed point away from that
  objective. Scaling by q instead of the realised share would match only in expectation, and
  under client sampling c would drift away from Σ_i (n_i/n) c_i, biasing the fixed point.)

Δc_i is on the scale of a gradient, not of a model update, so a clipping norm C chosen for
Δy may clip it noticeably.

K is counted, not assumed: the correction term is evaluated exactly once per optimizer step,
so its call count is the number of local steps actually taken (E × ``steps_per_epoch()``
under :func:`~regionfed.runtime.local_training.train_local`, whatever E the client uses).

The paper's derivation assumes plain SGD on the client. With AdamW the correction still
enters the gradient the optimizer sees, but the step is no longer η_l·(corrected gradient),
so option II's (x − y)/(K η_l) is only a scaled estimate of the mean corrected gradient.

Option I (``option="I"``, the paper's other choice, line 12): c_i⁺ = g_i(x), the client's
mean training gradient at the server model (one extra pass). It keeps c_i in gradient units
whatever the optimizer, so it is the variant to use with AdamW (see docs/baselines.md).

The correction is a custom extra loss (counted per step), so the simulator trains SCAFFOLD's
clients one by one (the batched trainer knows only the proximal term).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import (
    ClientContext,
    ClientResult,
    FederationView,
    TrainInstruction,
    flat_parameters,
)
from regionfed.algorithms.fedavg import FedAvg
from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import clip_update

#: the client state key of c_i and the instruction/metrics keys of c and Δc_i
CONTROL = "control"
CONTROL_DELTA = "control_delta"


class _ControlTerm:
    """``model ↦ ⟨θ(model) − anchor, correction⟩`` over all parameters (flat order, as
    :func:`~regionfed.algorithms.fedprox.proximal_term`); its gradient is ``correction``.
    Counts its calls: one per optimizer step."""

    def __init__(self, anchor: torch.Tensor, correction: torch.Tensor) -> None:
        self.anchor = anchor
        self.correction = correction
        self.calls = 0

    def __call__(self, model: nn.Module) -> torch.Tensor:
        self.calls += 1
        theta = flat_parameters(model)
        if self.anchor.device != theta.device:  # the model is on an accelerator: move once
            self.anchor = self.anchor.to(theta.device)
            self.correction = self.correction.to(theta.device)
        return torch.dot(theta - self.anchor, self.correction)


class Scaffold(FedAvg):
    name = "scaffold"

    def __init__(self, option: str = "II", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if option not in ("I", "II"):
            raise ConfigError(f"SCAFFOLD option must be 'I' or 'II', got {option!r}")
        self.option = option
        self.control = torch.zeros(0)

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        super().setup(init_params, view, rng)
        self.control = torch.zeros_like(self.params)

    def configure_train(self, rnd: int) -> list[TrainInstruction]:
        instructions = super().configure_train(rnd)
        for instruction in instructions:
            instruction.config[CONTROL] = self.control
        return instructions

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        start = instruction.params.detach()
        server_control = instruction.config[CONTROL]
        own = client.state.get(CONTROL)
        if own is None:
            own = torch.zeros_like(start)
        term = _ControlTerm(start, (server_control - own).detach())
        new, loss = client.train(start, epochs=instruction.config.get("epochs"),
                                 extra_loss=term)
        update = start - new  # Δy_i = x − y
        steps = term.calls  # K
        if self.option == "I":  # c_i⁺ = g_i(x)
            new_own = client.gradient(start)
        elif steps > 0:  # option II
            new_own = own - server_control + update / (steps * client.learning_rate)
        else:  # no local step (no data): nothing learned, c_i stays
            new_own = own
        client.state[CONTROL] = new_own
        return ClientResult(client.client_id, client.region, update, client.num_examples,
                            {"train_loss": loss, CONTROL_DELTA: new_own - own,
                             "local_steps": steps})

    def clip_released(self, result: ClientResult) -> ClientResult:
        """Both released vectors, Δy_i and Δc_i, are clipped on the client."""
        result = super().clip_released(result)
        if CONTROL_DELTA not in result.metrics:
            return result
        return replace(result, metrics={
            **result.metrics,
            CONTROL_DELTA: clip_update(result.metrics[CONTROL_DELTA], self.dp.clip)})

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        dim = self.params.numel()
        means = self.releases.joint_mean(
            [(r.update, r.metrics[CONTROL_DELTA]) for r in results],
            [r.num_examples for r in results],
            self.sample_rate * len(self.view.clients) * self.report_rate,
            regions=self.view.regions, what="model update + control variate (joint)",
            dims=[dim, dim], dtype=self.params.dtype)
        if means is None:
            return {"clients": 0, "control_norm": float(self.control.norm())}
        update, delta = means
        self.params = self.params - self.server_lr * update  # x ← x − η_g · mean(Δy)
        self.control = self.control + self._sampled_share(results) * delta  # c ← c + Σ w_i Δc_i
        return {"clients": len(results), "update_norm": float(update.norm()),
                "control_norm": float(self.control.norm())}

    def _sampled_share(self, results: list[ClientResult]) -> float:
        """What turns :meth:`private_mean` of the Δc_i into Σ_{i∈S} w_i Δc_i with the weights
        w_i of c = Σ_i w_i c_i: ``user`` mode divides the sum by the fixed q·N, so × q gives
        (1/N) Σ_{i∈S} Δc_i; the other modes take the data-size-weighted mean over S, so ×
        Σ_{i∈S} n_i / n gives Σ_{i∈S} (n_i/n) Δc_i exactly (× q would only match it in
        expectation, and c would drift away from Σ_i (n_i/n) c_i round after round)."""
        if self.dp.mode == "user":
            return self.sample_rate
        total = sum(self.view.num_examples.values())
        return sum(r.num_examples for r in results) / total if total else 0.0
