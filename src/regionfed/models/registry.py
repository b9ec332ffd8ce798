"""Model name → task (the task builds the model and owns its featurisation)."""

from __future__ import annotations

from typing import Any

from regionfed.data.federation import Federation
from regionfed.data.images import ImageDataset
from regionfed.data.queries import QueryDataset
from regionfed.errors import ConfigError
from regionfed.models.cnn import CNNConfig
from regionfed.models.image_task import ImageClassificationTask
from regionfed.models.query_task import QueryTask
from regionfed.models.tasks import Task
from regionfed.models.tiny import TinyConfig

MODELS = ("tiny", "cnn")


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
    if isinstance(model_config, CNNConfig):
        if not isinstance(federation.clients[0].train, ImageDataset):
            raise ConfigError("the cnn model needs an image dataset (femnist)")
        return ImageClassificationTask(int(federation.meta.get("num_classes", 62)),
                                       model_config)
    raise ConfigError(f"unknown model config {type(model_config).__name__}; known: "
                      f"{', '.join(MODELS)}")
