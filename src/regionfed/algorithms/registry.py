"""Every comparable method, by name (paper §4.3; docs/baselines.md).

Three kinds: ``reference`` (no training: ``majority``), ``pooled`` (centralised training on
pooled data: ``centralized``, ``centralized-rw``) and ``federated`` (a :class:`Strategy`
driven by a runtime).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from regionfed.algorithms.apfl import APFL
from regionfed.algorithms.base import Strategy
from regionfed.algorithms.ditto import Ditto
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.fedavg_ft import FedAvgFT
from regionfed.algorithms.fedbabu import FedBABU
from regionfed.algorithms.fedprox import FedProx
from regionfed.algorithms.fedrep import FedRep
from regionfed.algorithms.fedtp import FedTP
from regionfed.algorithms.local import LocalOnly
from regionfed.algorithms.pfedme import PFedMe
from regionfed.algorithms.regionfed import RegionFed, RegionFedAvg, RegionFedPersist
from regionfed.algorithms.regionfed.plus import RegionFedPlus
from regionfed.algorithms.regionfed.strategy import VARIANTS as REGIONFED_VARIANTS
from regionfed.algorithms.scaffold import Scaffold
from regionfed.errors import UnknownMethodError

if TYPE_CHECKING:  # the configuration imports the algorithms' configs: no cycle at run time
    from regionfed.config import RunConfig

StrategyFactory = Callable[..., Strategy]
VARIANT_SUMMARIES = {
    "dynamic": "RegionFed, per-region routing (paper Alg. 1) with the D.6 fallback",
    "ensemble": "RegionFed, confidence-weighted vote of grad/interp/meta (paper D.6, Eq. 17)",
}


@dataclass(frozen=True)
class MethodSpec:
    name: str
    kind: Literal["reference", "pooled", "federated"]
    summary: str
    strategy: StrategyFactory | None = None
    reweight_regions: bool = False
    #: the strategy's own keyword arguments, read from the run configuration
    options: Callable[[Any], dict[str, Any]] = lambda config: {}
    #: the dotted config key of the method's own hyper-parameter that fair tuning searches
    #: alongside the learning rate (:mod:`regionfed.tuning`)
    key_hyperparameter: str | None = None

    @property
    def cost(self) -> float:
        """A run's work relative to a ``fedavg`` run of the same configuration
        (:data:`RELATIVE_COST`)."""
        return RELATIVE_COST.get(self.name, 1.0)


#: each method's run time relative to ``fedavg``'s — measured for ``make run``'s methods
#: (default workload, one thread, 2026-12-06: fedavg 42 s, centralized 38 s, interp 104 s),
#: from the client passes a round makes for the others. A scheduling hint only: worker
#: pools get the runs in an order balanced by these (:func:`~regionfed.runtime.workers.
#: pool_order`), so that the last one to finish does not run alone for long.
RELATIVE_COST = {
    "majority": 0.0, "centralized": 0.9, "centralized-rw": 0.9, "local": 1.0,
    "fedavg": 1.0, "fedavg-ft": 1.6, "fedprox": 1.1, "scaffold": 1.2, "pfedme": 1.5,
    "ditto": 2.0, "apfl": 2.0,
    "fedbabu": 1.1, "fedrep": 1.2, "fedtp": 1.2, "region-fedavg": 1.15,
    "regionfed-grad": 1.5, "regionfed-interp": 2.5, "regionfed-meta": 2.1,
    "regionfed-dynamic": 1.5, "regionfed-ensemble": 5.0, "regionfed-persist": 1.5,
    "regionfed-plus": 2.0,
}


def _regionfed_options(config: Any) -> dict[str, Any]:
    return {"config": config.regionfed}


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec("majority", "reference",
                   "majority intent, input echoed for spell, all-O NER (trivial reference)"),
        MethodSpec("centralized", "pooled",
                   "one model on pooled training data (privacy-violating upper bound)"),
        MethodSpec("centralized-rw", "pooled",
                   "pooled data, loss re-weighted so each region counts 1/M",
                   reweight_regions=True),
        MethodSpec("local", "federated",
                   "each client trains alone; evaluated on its own test data", LocalOnly),
        MethodSpec("fedavg", "federated", "FedAvg (McMahan et al., 2017)", FedAvg),
        MethodSpec("fedavg-ft", "federated",
                   "FedAvg, then each client fine-tunes the global model on its own data "
                   "before evaluation and keeps it unless the global model validates better "
                   "(local adaptation, Yu et al., 2020)", FedAvgFT, options=lambda config: {
                       "finetune_epochs": config.baselines.fedavg_ft_epochs,
                       "choice_margin": config.baselines.fedavg_ft_margin},
                   key_hyperparameter="baselines.fedavg_ft_epochs"),
        MethodSpec("fedprox", "federated",
                   "FedProx (Li et al., 2020): FedAvg with a proximal term μ/2‖w − w^t‖²",
                   FedProx, options=lambda config: {"mu": config.baselines.fedprox_mu},
                   key_hyperparameter="baselines.fedprox_mu"),
        MethodSpec("scaffold", "federated",
                   "SCAFFOLD (Karimireddy et al., 2020): control variates correct client "
                   "drift (option II; baselines.scaffold_option)", Scaffold,
                   options=lambda config: {"option": config.baselines.scaffold_option},
                   key_hyperparameter="baselines.scaffold_option"),
        MethodSpec("pfedme", "federated",
                   "pFedMe (Dinh et al., 2020): personal models from Moreau envelopes, "
                   "regularised by λ/2‖θ − w‖²", PFedMe, options=lambda config: {
                       "lam": config.baselines.pfedme_lambda,
                       "inner_steps": config.baselines.pfedme_inner_steps,
                       "eta": config.baselines.pfedme_eta,
                       "beta": config.baselines.pfedme_beta},
                   key_hyperparameter="baselines.pfedme_lambda"),
        MethodSpec("ditto", "federated",
                   "Ditto (Li et al., 2021): FedAvg plus a personal model per client, "
                   "regularised toward the global one by λ/2‖v − w^t‖²", Ditto,
                   options=lambda config: {"lam": config.baselines.ditto_lambda},
                   key_hyperparameter="baselines.ditto_lambda"),
        MethodSpec("apfl", "federated",
                   "APFL (Deng et al., 2020): each client mixes its own model with the global "
                   "one, α·v + (1 − α)·w, with a learned α", APFL,
                   options=lambda config: {"alpha": config.baselines.apfl_alpha,
                                           "adaptive": config.baselines.apfl_adaptive},
                   key_hyperparameter="baselines.apfl_alpha"),
        MethodSpec("fedbabu", "federated",
                   "FedBABU (Oh et al., 2022): the head stays frozen during federated "
                   "training, each client fine-tunes the whole model before evaluation",
                   FedBABU, options=lambda config: {
                       "finetune_epochs": config.baselines.fedbabu_finetune_epochs},
                   key_hyperparameter="baselines.fedbabu_finetune_epochs"),
        MethodSpec("fedrep", "federated",
                   "FedRep (Collins et al., 2021): a shared body, a personal head per client",
                   FedRep, options=lambda config: {
                       "head_epochs": config.baselines.fedrep_head_epochs},
                   key_hyperparameter="baselines.fedrep_head_epochs"),
        MethodSpec("fedtp", "federated",
                   "FedTP (Li et al., 2023): a server hypernetwork generates per-client "
                   "low-rank Q/K/V deltas on a FedAvg-learned base (n/a without attention "
                   "or with DP)", FedTP, options=lambda config: {
                       "rank": config.baselines.fedtp_rank,
                       "embedding_dim": config.baselines.fedtp_embedding_dim,
                       "hidden_dim": config.baselines.fedtp_hidden_dim,
                       "hyper_lr": config.baselines.fedtp_hyper_lr},
                   key_hyperparameter="baselines.fedtp_rank"),
        MethodSpec("region-fedavg", "federated",
                   "hierarchical averaging, fixed α and ρ (isolates the hierarchy)",
                   RegionFedAvg, options=_regionfed_options),
        *(MethodSpec(f"regionfed-{v}", "federated", VARIANT_SUMMARIES.get(
            v, f"RegionFed, {v} adaptation (paper §3.3)"), functools.partial(RegionFed, v),
            options=_regionfed_options) for v in REGIONFED_VARIANTS),
        MethodSpec("regionfed-persist", "federated",
                   "RegionFed-grad with an adaptation that accumulates across rounds "
                   "(extra, not in the paper)", RegionFedPersist, options=_regionfed_options),
        MethodSpec("regionfed-plus", "federated",
                   "global model + noise-aware (James–Stein) shrunk regional offsets from a "
                   "split DP budget + personal models anchored on the regional model "
                   "(extra, not in the paper; regionfed_plus.* settings)", RegionFedPlus,
                   options=lambda config: {"config": config.regionfed_plus}),
    )
}


def resolve_methods(names: Sequence[str]) -> list[str]:
    """Validate method names; ``all`` expands to every registered method (in table order)."""
    if not names:
        raise UnknownMethodError("no methods given")
    out: list[str] = []
    for name in names:
        if name == "all":
            out.extend(m for m in METHODS if m not in out)
        elif name in METHODS:
            if name not in out:
                out.append(name)
        else:
            raise UnknownMethodError(
                f"unknown method {name!r}; known methods: {', '.join(METHODS)}, all")
    return out


def get_method(name: str) -> MethodSpec:
    return METHODS[resolve_methods([name])[0]]


def build_strategy(method: str, config: RunConfig) -> Strategy:
    """The configured strategy object of a federated method: its class with the run's
    sampling rate, server step, DP settings and the method's own options from ``config``;
    ``report_rate`` is the share of sampled clients expected to report (no dropout, no
    stragglers)."""
    spec = get_method(method)
    strategy = spec.strategy(sample_rate=config.training.sample_rate,
                             server_lr=config.training.server_lr, dp=config.dp,
                             **spec.options(config))
    strategy.report_rate = 1.0 - config.training.dropout - config.training.stragglers
    return strategy
