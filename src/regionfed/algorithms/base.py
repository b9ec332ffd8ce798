"""The strategy protocol: transport-free federated algorithms (docs/architecture.md).

A strategy is pure steps over its own state and messages, so the in-process simulator and a
distributed runtime (Flower) can drive the same object:

1. ``configure_train(round)`` → one :class:`TrainInstruction` per sampled client;
2. ``client_train(instruction, client)`` runs *on the client* with a :class:`ClientContext`
   the runtime supplies (local data access, persistent private client state) and returns a
   :class:`ClientResult` whose ``update`` is the pseudo-gradient Δ_u = θ_start − θ_end;
3. ``aggregate_train(round, results)`` updates the server/regional state and returns a log;
4. ``eval_params(client)`` names the model a client is evaluated with (global, regional or
   personal), so personalised methods are scored on each client's own test data.

A round is the generator :meth:`Strategy.run_round`: it yields lists of instructions and
receives the clients' results, so strategies that need more than one exchange per round
(RegionFed's regional fine-tune, meta gradient and ρ search) stay transport-free; the
runtime only forwards instructions to :meth:`Strategy.handle` on the named clients.

Strategies see flat parameter vectors only, never a model or a dataset. Privacy is applied
in one place, the strategy's :class:`~regionfed.privacy.releases.PrivateReleases`
(``self.releases``): it clips, adds the Gaussian noise and records the release event the
ledger composes (docs/privacy.md). :meth:`Strategy.private_mean` is its one-vector form.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch

from regionfed.errors import ConfigError, MethodNotApplicableError, NumericalError
from regionfed.privacy.mechanism import DPConfig, clip_update
from regionfed.privacy.randomized_response import privatized_histogram
from regionfed.privacy.releases import PrivateReleases, secret_rng

#: instruction kinds a client understands
TRAIN, GRADIENT, EVALUATE, HISTOGRAM = "train", "gradient", "evaluate", "histogram"


@dataclass(frozen=True)
class ParameterBlock:
    """One named parameter tensor of the model, located in the flat vector."""

    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def span(self) -> slice:
        return slice(self.offset, self.offset + self.size)

    def mask(self, dim: int) -> torch.Tensor:
        """A bool mask over the flat vector (``dim`` entries) selecting this tensor."""
        mask = torch.zeros(dim, dtype=torch.bool)
        mask[self.span] = True
        return mask


@dataclass(frozen=True)
class FederationView:
    """What a server legitimately knows: regions, client membership, training-set sizes, and
    the parameter groups the model declares (``head``, ``attention``, …; see
    :meth:`Task.parameter_groups`), so algorithms that treat a group specially (FedBABU,
    FedRep, FedTP) never look at the architecture themselves."""

    regions: tuple[str, ...]
    client_region: dict[str, str]
    num_examples: dict[str, int]
    parameter_groups: dict[str, tuple[ParameterBlock, ...]] = field(default_factory=dict)

    def group_mask(self, group: str, dim: int) -> torch.Tensor:
        """A bool mask over the flat vector (``dim`` entries) selecting ``group``; raises
        :class:`MethodNotApplicableError` if the model declares no such group."""
        blocks = self.parameter_groups.get(group)
        if not blocks:
            raise MethodNotApplicableError(
                f"the model declares no {group!r} parameters (declared groups: "
                f"{', '.join(sorted(self.parameter_groups)) or 'none'})")
        mask = torch.zeros(dim, dtype=torch.bool)
        for block in blocks:
            mask[block.span] = True
        return mask

    def clients_in(self, region: str) -> list[str]:
        return [c for c, r in self.client_region.items() if r == region]

    @property
    def clients(self) -> list[str]:
        return list(self.client_region)


@dataclass
class TrainInstruction:
    """A message to one client: what to compute (``kind``) from which parameters.

    ``train``: local training, reply Δ_u; ``gradient``: the mean gradient of the training
    loss at ``params``; ``evaluate``: the summed validation loss at ``params`` (reply
    ``metrics["loss_sum"]`` with ``num_examples`` validation examples; with
    ``config["score"]`` also ``metrics["score_sum"]``, the task score summed over them; a
    ``config["tag"]`` comes back as ``metrics["tag"]``);
    ``histogram``: the client's label counts after k-ary randomized response with
    ``config["epsilon"]`` (reply ``metrics["counts"]``), computed on the device.
    """

    client_id: str
    region: str
    params: torch.Tensor
    config: dict[str, Any] = field(default_factory=dict)
    kind: str = TRAIN


@dataclass
class ClientResult:
    client_id: str
    region: str
    update: torch.Tensor | None
    num_examples: int
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ensemble:
    """An evaluation model that is a weighted vote of several parameter vectors (paper D.6,
    Eq. 17: ŷ = argmax_c Σ_s w_s P_s(y = c | x)); what :meth:`Strategy.eval_params` returns
    for an ensemble method. The weights need not sum to 1: the argmax is scale-free."""

    members: tuple[torch.Tensor, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.members or len(self.members) != len(self.weights):
            raise ValueError("an ensemble needs one weight per member and ≥ 1 member")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(f"ensemble weights must be ≥ 0 and not all 0: {self.weights}")


def flat_parameters(model: torch.nn.Module) -> torch.Tensor:
    """All parameters as one vector in flat order, differentiable (for loss terms)."""
    return torch.cat([p.reshape(-1) for p in model.parameters()])


class Proximal:
    """The extra loss ``model ↦ (μ/2)·‖θ(model) − anchor‖²`` over all parameters (flat
    order): FedProx's proximal term (Li et al. 2020, Eq. 2) and Ditto's personal objective.
    Callable like any ``extra_loss``; a runtime that trains many clients at once recognizes
    it and adds its gradient μ(θ − anchor) itself (:meth:`ClientContext.train`)."""

    def __init__(self, anchor: torch.Tensor, mu: float) -> None:
        self.anchor = anchor
        self.mu = mu
        self._placed = {anchor.device: anchor}  # the anchor on the model's device, copied once

    def __call__(self, model: torch.nn.Module) -> torch.Tensor:
        theta = flat_parameters(model)
        if theta.device not in self._placed:
            self._placed[theta.device] = self.anchor.to(theta.device)
        return 0.5 * self.mu * (theta - self._placed[theta.device]).pow(2).sum()


class ClientContext(Protocol):
    """A client as seen by strategy code running on it (supplied by the runtime)."""

    client_id: str
    region: str
    num_examples: int
    state: dict[str, Any]  # persistent across rounds, private to the client, never sent

    def train(self, start: torch.Tensor, *, epochs: int | None = None,
              extra_loss: Callable[[torch.nn.Module], torch.Tensor] | None = None,
              stream: str = "main", trainable: torch.Tensor | None = None,
              mixing: tuple[float, torch.Tensor] | None = None,
              max_steps: int | None = None, repeatable: bool = False
              ) -> tuple[torch.Tensor, float]:
        """Local training from ``start`` (loss + ``extra_loss(model)`` if given); returns
        (new params, mean training loss). An ``extra_loss`` that is a :class:`Proximal`
        lets the in-process runtime train this call batched with other clients' calls.
        ``stream`` names the shuffling stream, so a second model trained on the device
        draws its own batches; ``repeatable`` draws the stream's first batches at every
        call (training at evaluation that is not kept: the same start gives the same model
        however often, and on whichever runtime, the client was evaluated). ``trainable``
        (bool mask) freezes the other entries bit for bit; ``mixing = (a, b)`` trains θ of
        a model that computes with ``a·θ + b``; ``max_steps`` caps the optimizer steps."""

    def steps_per_epoch(self) -> int:
        """Optimizer steps of one local epoch (⌈n / batch size⌉)."""

    @property
    def local_epochs(self) -> int:
        """E, the epochs ``train`` runs when not told otherwise."""

    @property
    def learning_rate(self) -> float:
        """The local optimizer's learning rate η_l."""

    def gradient(self, params: torch.Tensor) -> torch.Tensor:
        """Mean gradient of the training loss at ``params`` (one pass, no update)."""

    def validation_loss(self, params: torch.Tensor) -> tuple[float, int]:
        """(sum of per-example validation losses, number of validation examples)."""

    def validation_score(self, params: torch.Tensor) -> tuple[float, int]:
        """(task score × number of validation examples, number of validation examples)."""

    def validation_leave_one_out(self, params: torch.Tensor) -> np.ndarray:
        """The task score of the validation split without each example in turn (the
        jackknife's replicates; empty for fewer than 2 validation examples)."""

    def labels(self) -> tuple[np.ndarray, int]:
        """(class label of every training example, number of classes)."""


def check_finite(update: torch.Tensor, who: str) -> None:
    """Reject NaN/inf updates before they reach any aggregate."""
    if not torch.isfinite(update).all():
        raise NumericalError(f"non-finite values (NaN/inf) in the update from {who}")


class Strategy(ABC):
    """Base class: Poisson client sampling, DP aggregation, the client-side dispatch, and the
    default evaluation model. Subclasses define the round (:meth:`run_round`)."""

    name: str = "strategy"
    #: False for a method whose clients never send anything derived from their data
    #: (``local``): it has no release to account at all
    shares_updates: bool = True
    #: True when :meth:`eval_params` needs the client's private state (client-personalized
    #: methods): a distributed runtime then computes it on the client's own node, from the
    #: global ``params`` and that state
    evaluates_on_client: bool = False
    #: True when every update the strategy receives is used only through data-weighted
    #: means within a region (DP off): then a transport may hand it one securely
    #: aggregated result per region instead (SecAgg+). Not inherited: each class opts in.
    secure_aggregation: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "secure_aggregation" not in cls.__dict__:
            cls.secure_aggregation = False

    def __init__(self, sample_rate: float = 1.0, server_lr: float = 1.0,
                 dp: DPConfig | None = None) -> None:
        if not 0.0 < sample_rate <= 1.0:
            raise ConfigError(f"sample_rate must be in (0, 1], got {sample_rate}")
        self.sample_rate = sample_rate
        self.server_lr = server_lr
        self.dp = dp or DPConfig(mode="off")
        self.params: torch.Tensor = torch.zeros(0)
        self.view: FederationView | None = None
        self.rng = np.random.default_rng(0)
        #: clips, noises and records every release (the ledger composes its events)
        self.releases = PrivateReleases(self.dp, sample_rate)
        #: (ε_LDP, what, items per user) of every local-DP report this strategy asked for
        self.ldp_reports: list[tuple[float, str, int]] = []
        #: data-dependent choices that reach a released model without a DP release (only
        #: with ``dp.allow_unaccounted``; listed in ``privacy.json``)
        self.unaccounted: list[str] = []
        #: expected share of sampled clients whose replies arrive (1 − dropout − stragglers,
        #: :mod:`regionfed.runtime.faults`): scales the fixed DP denominator
        self.report_rate = 1.0

    def setup(self, init_params: torch.Tensor, view: FederationView,
              rng: np.random.Generator) -> None:
        self.params = init_params.clone()
        self.view = view
        # Poisson sampling amplifies privacy only while the sample stays secret: under DP
        # the samples come from OS entropy, not from the run seed
        self.rng = secret_rng(self.dp, rng)

    def private_mean(self, results: list[ClientResult], expected_clients: float,
                     regions: list[str] | None = None, what: str = "model update"
                     ) -> torch.Tensor | None:
        """The (DP) mean of the results' updates over the clients of ``regions`` (default:
        all), released through :attr:`releases` (docs/privacy.md).

        ``user`` mode: per-client clipping, one Gaussian on the sum, fixed denominator
        ``expected_clients`` = q·n (times :attr:`report_rate` when clients may fail to
        report); ``region``: clip the weighted mean, add noise; ``off``: data-size-weighted
        mean. ``None`` when nothing can be released (empty, non-user).
        """
        if regions is None:
            regions = self.view.regions if self.view is not None else ("all",)
        return self.releases.mean([r.update for r in results],
                                  [r.num_examples for r in results],
                                  expected_clients * self.report_rate, regions=regions,
                                  what=what, dim=self.params.numel(), dtype=self.params.dtype)

    @abstractmethod
    def run_round(self, rnd: int
                  ) -> Generator[list[TrainInstruction], list[ClientResult], dict[str, Any]]:
        """One round: yield instructions, receive the results, return the round's log."""

    def handle(self, instruction: TrainInstruction, client: ClientContext) -> ClientResult:
        """Client side: carry out one instruction (dispatch on its ``kind``); with
        ``dp.clip_on_client`` its released vectors are clipped before they leave."""
        result = self._carry_out(instruction, client)
        if self.dp.clip_on_client and self.dp.mode == "user":
            result = self.clip_released(result)
        if self.dp.adds_noise and "train_loss" in result.metrics:
            # an un-noised statistic of the client's data: under DP it never leaves
            result = replace(result, metrics={k: v for k, v in result.metrics.items()
                                              if k != "train_loss"})
        return result

    def clip_released(self, result: ClientResult) -> ClientResult:
        """Client-side L2 clipping (to ``dp.clip``) of every vector this client releases
        into :meth:`private_mean` (default: the update), so the server's clip is a no-op."""
        if result.update is None:
            return result
        return replace(result, update=clip_update(result.update, self.dp.clip))

    def _carry_out(self, instruction: TrainInstruction, client: ClientContext
                   ) -> ClientResult:
        if instruction.kind == TRAIN:
            return self.client_train(instruction, client)
        if instruction.kind == GRADIENT:
            grad = client.gradient(instruction.params)
            return ClientResult(client.client_id, client.region, grad, client.num_examples)
        if instruction.kind == EVALUATE:
            loss_sum, count = client.validation_loss(instruction.params)
            metrics = {"loss_sum": loss_sum}
            if instruction.config.get("score"):
                metrics["score_sum"] = client.validation_score(instruction.params)[0]
            if "tag" in instruction.config:  # lets the server match replies to candidates
                metrics["tag"] = instruction.config["tag"]
            return ClientResult(client.client_id, client.region, None, count, metrics)
        if instruction.kind == HISTOGRAM:
            labels, num_classes = client.labels()
            # the coins are the client's own: the server sends a seed only when the run is
            # not private (DP off, or a test's dp.noise_seed), else it could undo them
            seed = instruction.config.get("seed")
            rng = secret_rng(self.dp, np.random.default_rng(seed))
            if seed is None and not self.dp.secret_randomness:
                raise ConfigError("a histogram instruction without DP needs a seed")
            counts = privatized_histogram(labels, num_classes, instruction.config["epsilon"],
                                          rng)
            return ClientResult(client.client_id, client.region, None, len(labels),
                                {"counts": counts})
        raise ConfigError(f"unknown instruction kind {instruction.kind!r}")

    def sample_clients(self) -> list[str]:
        """Poisson sampling: each client independently with probability ``sample_rate``."""
        clients = self.view.clients
        if self.sample_rate >= 1.0:
            return clients
        keep = self.rng.random(len(clients)) < self.sample_rate
        return [c for c, k in zip(clients, keep, strict=True) if k]

    def client_train(self, instruction: TrainInstruction, client: ClientContext
                     ) -> ClientResult:
        """Default client step: local training from the received model, send Δ_u."""
        return self.train_and_report(instruction, client)

    @staticmethod
    def train_and_report(instruction: TrainInstruction, client: ClientContext,
                         **train_options: Any) -> ClientResult:
        """Local training from the received model (``train_options`` go to
        :meth:`ClientContext.train`, e.g. an ``extra_loss``); reply Δ_u = θ^t − θ_u."""
        new, loss = client.train(instruction.params, epochs=instruction.config.get("epochs"),
                                 **train_options)
        return ClientResult(client.client_id, client.region, instruction.params - new,
                            client.num_examples, {"train_loss": loss})

    def eval_params(self, client_id: str, region: str, client: ClientContext
                    ) -> torch.Tensor | Ensemble:
        """The parameters ``client_id`` is evaluated with (default: the global model)."""
        return self.params

    def served_regional_params(self, region: str) -> torch.Tensor | None:
        """For a strategy whose :meth:`eval_params` runs on the client
        (:attr:`evaluates_on_client`): the regional model the server itself keeps and sends
        ``region``'s clients, if any — a release like the global model, so it is saved with
        the run and audited. ``None`` (default): nothing beyond the global model."""
        return None

    def client_evaluation_arrays(self, region: str) -> dict[str, torch.Tensor]:
        """Server state beyond ``params`` that a client-side :meth:`eval_params` of a client
        in ``region`` needs (e.g. its regional model): a distributed runtime sends it with
        the evaluation request, and the client's node hands it to
        :meth:`receive_client_evaluation_arrays` (default: nothing)."""
        return {}

    def receive_client_evaluation_arrays(self, region: str,
                                         arrays: dict[str, torch.Tensor]) -> None:
        """On a client's node: take what :meth:`client_evaluation_arrays` sent (default:
        nothing to take)."""
        return None

    def evaluation_diagnostics(self) -> dict[str, Any]:
        """What the strategy decided per client at its last in-process evaluation that a
        run's results should keep (e.g. which candidate model each client chose; default:
        nothing)."""
        return {}

    def personalize_users(self, region: str, users: Mapping[str, ClientContext]
                          ) -> dict[str, torch.Tensor] | None:
        """A user-level stage after training (a runtime hook): each user's personal model,
        adapted on its device from what the strategy serves ``region``; ``None`` (default)
        when the strategy has no such stage."""
        return None


class SingleExchangeStrategy(Strategy):
    """A round of one exchange: configure the sampled clients, train, aggregate."""

    def configure_train(self, rnd: int) -> list[TrainInstruction]:
        return [TrainInstruction(c, self.view.client_region[c], self.params)
                for c in self.sample_clients()]

    def run_round(self, rnd: int
                  ) -> Generator[list[TrainInstruction], list[ClientResult], dict[str, Any]]:
        results = yield self.configure_train(rnd)
        return self.aggregate_train(rnd, results)

    @abstractmethod
    def aggregate_train(self, rnd: int, results: list[ClientResult]) -> dict[str, Any]:
        """Fold the round's client results into the strategy state; return a round log."""
