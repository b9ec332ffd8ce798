"""Where models compute (``training.device``): the CPU, or an accelerator when asked.

Strategies never see a device: they hold CPU parameter vectors, and the runtime copies a
vector into the model, moves each batch to the model's device and copies results back
(:mod:`regionfed.runtime.local_training`). Client batching (vmap) runs where the model is;
on an accelerator it is opt-in (``training.client_batching: on``) until it is measured
there (benchmarks/gpu_check.py); ``auto`` batches on the CPU only.
"""

from __future__ import annotations

import os

import torch

from regionfed.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``/``cuda:N``, or ``auto`` (CUDA when PyTorch sees a GPU, else CPU);
    a CUDA device that is not there is a :class:`ConfigError`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"training.device: unknown device {name!r} (cpu, cuda, cuda:N, "
                          "auto)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"training.device: {name!r} requested but PyTorch sees no "
                              "CUDA GPU (this torch build or machine has none)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"training.device: {name!r} requested but only "
                              f"{torch.cuda.device_count()} GPU(s) are visible")
        # deterministic cuBLAS needs this before its first call
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    elif device.type != "cpu":
        raise ConfigError(f"training.device: {name!r} is not supported (cpu, cuda, auto)")
    return device
