"""Model name → task (the task builds the model and owns its featurisation)."""

from __future__ import annotations

from typing import Any

from regionfed.data.federation import Federation
from regionfed.data.images import ImageDataset
from regionfed.data.queries import QueryDataset
from regionfed.data.text import TextDataset
from regionfed.errors import ConfigError
from regionfed.models.cnn import CNNConfig
from regionfed.models.image_task import ImageClassificationTask
from regionfed.models.minilm import MiniLMConfig
from regionfed.models.query_task import QueryTask
from regionfed.models.t5 import T5ModelConfig
from regionfed.models.tasks import Task
from regionfed.models.tiny import TinyConfig

MODELS = ("tiny", "t5-tiny", "t5-small", "minilm", "cnn")


def build_task(model_config: Any, federation: Federation) -> Task:
    if isinstance(model_config, TinyConfig | T5ModelConfig | MiniLMConfig):
        if isinstance(model_config, TinyConfig | MiniLMConfig) and isinstance(
                federation.clients[0].train, TextDataset):
            return _text_classification_task(model_config, federation)
        if not isinstance(federation.clients[0].train, QueryDataset):
            texts = "" if isinstance(model_config, T5ModelConfig) else ", reviews"
            raise ConfigError(f"the {model_config.name} model needs a text dataset "
                              f"(esci-synth, esci{texts})")
        vocabulary = _query_vocabulary(federation)
        if isinstance(model_config, T5ModelConfig):
            from regionfed.models.t5_task import T5QueryTask

            return T5QueryTask(vocabulary, model_config)
        if isinstance(model_config, MiniLMConfig):
            from regionfed.models.minilm_task import MiniLMQueryTask

            return MiniLMQueryTask(vocabulary, model_config)
        return QueryTask(vocabulary, model_config)
    if isinstance(model_config, CNNConfig):
        if not isinstance(federation.clients[0].train, ImageDataset):
            raise ConfigError("the cnn model needs an image dataset (femnist)")
        return ImageClassificationTask(int(federation.meta.get("num_classes", 62)),
                                       model_config)
    raise ConfigError(f"unknown model config {type(model_config).__name__}; known: "
                      f"{', '.join(MODELS)}")


def _query_vocabulary(federation: Federation) -> list[str]:
    """The public word list shipped with the data, else the training targets' words."""
    vocabulary = federation.meta.get("vocabulary")
    if vocabulary:
        return list(vocabulary)
    return sorted({w for c in federation.clients for t in c.train.targets for w in t})


def _text_classification_task(config: TinyConfig | MiniLMConfig,
                              federation: Federation) -> Task:
    """``tiny`` or ``minilm`` on text classification (reviews): classes from ``meta``
    (``num_classes``), else from the data of every split; ``tiny``'s text length from
    ``meta`` (``max_tokens``), else the longest text (``minilm`` cuts WordPiece sequences
    to its ``max_text_pieces``)."""
    splits = [c.split(s) for c in federation.clients for s in ("train", "val", "test")]
    num_classes = federation.meta.get("num_classes") or \
        1 + max(int(d.label.max()) for d in splits if len(d))
    if isinstance(config, MiniLMConfig):
        from regionfed.models.minilm_text_task import MiniLMTextClassificationTask

        return MiniLMTextClassificationTask(int(num_classes), config)
    from regionfed.models.text_classification_task import TextClassificationTask

    max_len = federation.meta.get("max_tokens") or max(len(t) for d in splits for t in d.tokens)
    return TextClassificationTask(int(num_classes), config, max_len=int(max_len))
