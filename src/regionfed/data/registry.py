"""Dataset name → federation builder."""

from __future__ import annotations

from typing import Any

from regionfed.data.esci_synth import EsciSynthConfig, generate_esci_synth
from regionfed.data.federation import Federation
from regionfed.data.femnist import FemnistConfig, load_femnist
from regionfed.errors import ConfigError

DATASETS = ("esci-synth", "femnist")


def build_federation(dataset: str, data_config: Any) -> Federation:
    if dataset == "esci-synth":
        if not isinstance(data_config, EsciSynthConfig):
            raise ConfigError("esci-synth needs an EsciSynthConfig")
        return generate_esci_synth(data_config)
    if dataset == "femnist":
        if not isinstance(data_config, FemnistConfig):
            raise ConfigError("femnist needs a FemnistConfig")
        return load_femnist(data_config)
    raise ConfigError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
