"""Fair hyper-parameter tuning (``compare --tune``, docs/cli.md): every trained method picks
its learning rate and its own key hyper-parameter (μ, λ, α, …) from a small grid, by
validation Overall, with the same round and epoch budget as the real runs.

Each candidate is one ordinary run on a dedicated tuning seed (never one of the reported
seeds), scored by the validation Overall of its last evaluation (personalised methods on
their personalised models, like every evaluation). Ties go to the earlier candidate, so the
grid order (defaults first) decides. The chosen values and every candidate's score are
recorded in ``results.json`` next to the method's results.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: the grid of every key hyper-parameter a method may declare (dotted config keys)
DEFAULT_GRIDS: dict[str, list[Any]] = {
    "baselines.fedprox_mu": [0.001, 0.01, 0.1],
    "baselines.scaffold_option": ["II", "I"],
    "baselines.ditto_lambda": [0.1, 1.0],
    "baselines.apfl_alpha": [0.25, 0.5],
    "baselines.fedbabu_finetune_epochs": [1, 2],
    "baselines.fedavg_ft_epochs": [3, 8],
    "baselines.fedrep_head_epochs": [1, 2],
    "baselines.pfedme_lambda": [1.0, 15.0],  # η = 1/λ unless baselines.pfedme_eta is set
    "baselines.fedtp_rank": [2, 8],
}


class TuningConfig(BaseModel):
    """Which grids are searched (``tuning.enabled`` turns the search on)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    #: local learning rates tried for every trained method
    lr: list[float] = Field(default_factory=lambda: [1e-3, 3e-3, 1e-2], min_length=1)
    #: dotted config key → values tried, for the methods whose key hyper-parameter it is
    grids: dict[str, list[Any]] = Field(default_factory=lambda: dict(DEFAULT_GRIDS))
    #: the model-initialisation / shuffling seed of the tuning runs
    seed: int = Field(1000, ge=0)

    @field_validator("lr")
    @classmethod
    def _positive(cls, values: list[float]) -> list[float]:
        if any(not v > 0 for v in values):
            raise ValueError(f"learning rates must be > 0, got {values}")
        return values

    @field_validator("grids")
    @classmethod
    def _non_empty(cls, grids: dict[str, list[Any]]) -> dict[str, list[Any]]:
        empty = [k for k, v in grids.items() if not v]
        if empty:
            raise ValueError(f"empty grid for {', '.join(empty)}")
        return grids


def candidates(tuning: TuningConfig, key_hyperparameter: str | None
               ) -> list[dict[str, Any]]:
    """Every grid point of a method: {dotted key: value}, learning rate first."""
    axes: list[tuple[str, list[Any]]] = [("training.optimizer.lr", tuning.lr)]
    if key_hyperparameter is not None:
        axes.append((key_hyperparameter,
                     tuning.grids.get(key_hyperparameter)
                     or DEFAULT_GRIDS[key_hyperparameter]))
    keys = [k for k, _ in axes]
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(v for _, v in axes))]


def final_validation_overall(history: list[dict[str, Any]]) -> float:
    """The validation Overall of a run's last evaluation."""
    scored = [log["val"]["overall"] for log in history if "val" in log]
    if not scored:
        raise ValueError("the run has no validation evaluation to tune on")
    return float(scored[-1])


def choose(scored: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """The candidate with the highest validation score (the first one on ties)."""
    best = max(range(len(scored)), key=lambda i: (scored[i][1], -i))
    return scored[best][0]
