"""``training.device``: CPU by default, ``auto`` falls back to the CPU, a GPU that is not
there is a clear configuration error (no silent CPU run of a GPU protocol)."""

import pytest
import torch

from regionfed.config import TrainingConfig, build_config
from regionfed.errors import ConfigError
from regionfed.runtime.device import resolve_device


def test_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert TrainingConfig().device == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_missing_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="no CUDA GPU"):
        resolve_device("cuda:1")


def test_unknown_device_names_are_rejected_by_the_config():
    with pytest.raises(ConfigError, match="training.device"):
        build_config({"training": {"device": "tpu"}})
    assert build_config({"training": {"device": "cuda:0"}}).training.device == "cuda:0"
