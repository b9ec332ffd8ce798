"""Dataset name → federation builder."""

from __future__ import annotations

from typing import Any

from regionfed.data.esci import EsciConfig, load_esci
from regionfed.data.esci_synth import EsciSynthConfig, generate_esci_synth
from regionfed.data.federation import Federation
from regionfed.data.femnist import FemnistConfig, load_femnist
from regionfed.data.reviews import ReviewsConfig, load_reviews
from regionfed.errors import ConfigError

DATASETS = ("esci-synth", "femnist", "esci", "reviews")


def build_federation(dataset: str, data_config: Any) -> Federation:
    """The federation of ``dataset`` built from its typed ``data_config``."""
    if dataset == "esci-synth":
        if not isinstance(data_config, EsciSynthConfig):
            raise ConfigError("esci-synth needs an EsciSynthConfig")
        return generate_esci_synth(data_config)
    if dataset == "femnist":
        if not isinstance(data_config, FemnistConfig):
            raise ConfigError("femnist needs a FemnistConfig")
        return load_femnist(data_config)
    if dataset == "esci":
        if not isinstance(data_config, EsciConfig):
            raise ConfigError("esci needs an EsciConfig")
        return load_esci(data_config)
    if dataset == "reviews":
        if not isinstance(data_config, ReviewsConfig):
            raise ConfigError("reviews needs a ReviewsConfig")
        return load_reviews(data_config)
    raise ConfigError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
