"""FedTP (Li, Hong et al., 2023, "FedTP: Federated Learning by Transformer Personalization",
IEEE TNNLS), with low-rank attention deltas.

FedTP (§III) personalises a transformer through its self-attention: a hypernetwork H_φ on the
server maps a learnable embedding e_i of client i to that client's self-attention projection
parameters ("learn-to-personalise"); every other parameter is learned by FedAvg. Both φ and
the embeddings are trained by the chain rule as in pFedHN (Shamsian et al., 2021): the
client's local change of the generated parameters is the gradient w.r.t. them.

Our variant (deliberate deviation): instead of generating the full projections, H_φ generates
a per-client **low-rank delta** on top of a shared base that FedAvg learns. For every 2-D block
W (out × in) of the model's declared ``attention`` group (Q/K/V projection weights; the
algorithm never looks at the architecture, see :meth:`FederationView.group_mask`), client i
computes with W + U_i V_iᵀ, U_i ∈ R^{out×r}, V_i ∈ R^{in×r}; 1-D blocks (biases) get no delta.
Writing D_i for the flat delta (zero outside the attention matrices), a round is

1. server: D_i = H_φ(e_i) for every sampled client; send θ^t + D_i;
2. client: E local epochs from θ^t + D_i (plain local training), reply
   Δ_i = (θ^t + D_i) − θ_i^end;
3. server: θ^{t+1} = θ^t − η_g · mean_i(Δ_i) (FedAvg on the shared base), and one optimizer
   step (Adam, ``hyper_lr``) on φ and the embeddings of the sampled clients minimising the
   surrogate Σ_i ⟨D_i(φ, e_i), sg(Δ_i)⟩, whose gradient is Σ_i (∂D_i/∂(φ, e_i))ᵀ Δ_i —
   exactly pFedHN's/FedTP's hypernetwork update with Δ_i as ∂L_i/∂D_i (one step per round
   over the unweighted sum of the sampled clients, rather than one step per client).

Each client is evaluated with θ + D_i (its current generated delta).

H_φ: e_i (``embedding_dim``) → Linear → ReLU (``hidden_dim``) → Linear → every U and V entry.
The output layer's weights start at zero and its U biases at zero, so U_i = 0 and D_i = 0
at the start (the first round is FedAvg's), while the V biases start random so ∂D/∂U = ·V ≠ 0
and the first surrogate step already moves U_i (through the random ReLU features of e_i, so
client-specifically); V_i and e_i receive gradients once U_i ≠ 0.

Differential privacy: the hypernetwork update consumes every client's raw Δ_i on its own,
with no clipping or noise, so no user-level guarantee holds; with ``dp.mode != "off"`` the
method is not applicable (:class:`MethodNotApplicableError`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from regionfed.algorithms.base import (
    ClientContext,
    ClientResult,
    FederationView,
    ParameterBlock,
    TrainInstruction,
)
from regionfed.algorithms.fedavg import FedAvg
from regionfed.errors import ConfigError, MethodNotApplicableError

ATTENTION = "attention"


@dataclass(frozen=True)
class _Factor:
    """Where one attention matrix's U (out × r) and V (in × r) lie in the hypernetwork output."""

    block: ParameterBlock
    u: slice
    v: slice


class _HyperNetwork(nn.Module):
    """Client embeddings plus a one-hidden-layer ReLU MLP producing all low-rank factors."""

    def __init__(self, num_clients: int, embedding_dim: int, hidden_dim: int,
                 factors: list[_Factor], rank: int, generator: torch.Generator) -> None:
        super().__init__()
        width = factors[-1].v.stop

        def uniform(*shape: int, bound: float) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) * bound)

        # nn.Embedding / nn.Linear's own initialisation would draw from the global RNG
        self.embeddings = nn.Parameter(torch.randn(num_clients, embedding_dim,
                                                   generator=generator))
        self.hidden_weight = uniform(hidden_dim, embedding_dim,
                                     bound=1.0 / math.sqrt(embedding_dim))
        self.hidden_bias = uniform(hidden_dim, bound=1.0 / math.sqrt(embedding_dim))
        self.out_weight = nn.Parameter(torch.zeros(width, hidden_dim))
        bias = torch.zeros(width)
        for f in factors:  # V ~ N(0, 1/in): U_i V_iᵀ has the scale of U_i
            fan_in = f.block.shape[1]
            bias[f.v] = torch.randn(fan_in * rank, generator=generator) / math.sqrt(fan_in)
        self.out_bias = nn.Parameter(bias)

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        """The flat factors of the clients at ``index``: (len(index), width)."""
        h = torch.relu(self.embeddings[index] @ self.hidden_weight.T + self.hidden_bias)
        return h @ self.out_weight.T + self.out_bias


class FedTP(FedAvg):
    """FedAvg on the shared model plus hypernetwork-generated low-rank attention deltas."""

    name = "fedtp"

    def __init__(self, rank: int = 4, embedding_dim: int = 16, hidden_dim: int = 64,
                 hyper_lr: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for key, value in (("rank", rank), ("embedding_dim", embedding_dim),
                           ("hidden_dim", hidden_dim)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ConfigError(f"FedTP {key} must be an integer >= 1, got {value!r}")
        if not (isinstance(hyper_lr, int | float) and math.isfinite(hyper_lr) and hyper_lr > 0):
            raise ConfigError(f"FedTP hyper_lr must be a finite number > 0, got {hyper_lr!r}")
        if self.dp.mode != "off":
            raise MethodNotApplicableError(
                "fedtp has no user-level DP guarantee: its hypernetwork update uses every "
                "client's raw update individually (run it with dp.mode = off)")
        self.rank = int(rank)
        self.embedding_dim = int(embedding_dim)
        self.hidden_dim = int(hidden_dim)
        self.hyper_lr = float(hyper_lr)
        self.factors: list[_Factor] = []
        self.client_index: dict[str, int] = {}
        self.hypernet: _HyperNetwork | None = None
        self.hyper_optimizer: torch.optim.Optimizer | None = None

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        super().setup(init_params, view, rng)
        view.group_mask(ATTENTION, init_params.numel())  # raises if nothing is declared
        matrices = [b for b in view.parameter_groups[ATTENTION] if len(b.shape) == 2]
        if not matrices:
            raise MethodNotApplicableError(
                "fedtp needs 2-D attention projection weights; the model's attention group "
                "holds none")
        self.factors, offset = [], 0
        for block in matrices:
            out_dim, in_dim = block.shape
            u = slice(offset, offset + out_dim * self.rank)
            v = slice(u.stop, u.stop + in_dim * self.rank)
            self.factors.append(_Factor(block, u, v))
            offset = v.stop
        self.client_index = {c: i for i, c in enumerate(view.clients)}
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        self.hypernet = _HyperNetwork(len(self.client_index), self.embedding_dim,
                                      self.hidden_dim, self.factors, self.rank, generator)
        self.hypernet.to(init_params.dtype)
        self.hyper_optimizer = torch.optim.Adam(self.hypernet.parameters(), lr=self.hyper_lr)

    # -- generated deltas ----------------------------------------------------------------
    def _products(self, client_ids: list[str]) -> list[torch.Tensor]:
        """U_i V_iᵀ of every attention matrix, each (clients, out, in) (with autograd)."""
        index = torch.tensor([self.client_index[c] for c in client_ids], dtype=torch.long)
        flat = self.hypernet(index)
        n, r = len(client_ids), self.rank
        return [flat[:, f.u].view(n, f.block.shape[0], r)
                @ flat[:, f.v].view(n, f.block.shape[1], r).transpose(1, 2)
                for f in self.factors]

    @torch.no_grad()
    def deltas(self, client_ids: list[str]) -> torch.Tensor:
        """The current flat deltas D_i (zero outside the attention matrices), (clients, dim)."""
        out = torch.zeros(len(client_ids), self.params.numel(), dtype=self.params.dtype)
        for f, product in zip(self.factors, self._products(client_ids), strict=True):
            out[:, f.block.span] = product.reshape(len(client_ids), -1)
        return out

    def delta(self, client_id: str) -> torch.Tensor:
        """Client ``client_id``'s current flat delta D_i."""
        return self.deltas([client_id])[0]

    # -- the round -----------------------------------------------------------------------
    def configure_train(self, rnd: int) -> list[TrainInstruction]:
        clients = self.sample_clients()
        if not clients:
            return []
        deltas = self.deltas(clients)
        return [TrainInstruction(c, self.view.client_region[c], self.params + d)
                for c, d in zip(clients, deltas, strict=True)]

    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        log = super().aggregate_train(rnd, results)
        if not results:
            return log
        self.hyper_optimizer.zero_grad(set_to_none=True)
        ids = [r.client_id for r in results]
        surrogate = sum(
            (product * torch.stack([r.update[f.block.span] for r in results])
             .view_as(product)).sum()
            for f, product in zip(self.factors, self._products(ids), strict=True))
        surrogate.backward()
        self.hyper_optimizer.step()
        log["delta_norm"] = float(self.deltas(ids).norm(dim=1).mean())
        return log

    def eval_params(self, client_id: str, region: str, client: ClientContext) -> torch.Tensor:
        if client_id not in self.client_index:
            return self.params
        return self.params + self.delta(client_id)
