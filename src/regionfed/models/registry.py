"""Model name → task (the task builds the model and owns its featurisation)."""

from __future__ import annotations

from typing import Any

from regionfed.data.federation import Federation
from regionfed.data.queries import QueryDataset
from regionfed.errors import ConfigError
from regionfed.models.query_task import QueryTask
from regionfed.models.tasks import Task
from regionfed.models.tiny import TinyConfig

MODELS = ("tiny",)


def build_task(model_config: Any, federation: Federation) -> Task:
    if isinstance(model_config, TinyConfig):
        if not isinstance(federation.clients[0].train, QueryDataset):
            raise ConfigError("the tiny model needs a query dataset (esci-synth, esci)")
        vocabulary = federation.meta.get("vocabulary")
        if not vocabulary:
            # no public word list shipped with the data: fall back to the training targets
            vocabulary = sorted({w for c in federation.clients for t in c.train.targets
                                 for w in t})
        return QueryTask(vocabulary, model_config)
    raise ConfigError(f"unknown model config {type(model_config).__name__}; known: "
                      f"{', '.join(MODELS)}")
