"""Flat parameter vectors ⇄ models: the only form in which strategies see a model."""

from __future__ import annotations

import torch
from torch import nn


def get_flat(model: nn.Module) -> torch.Tensor:
    """A detached copy of all parameters as one float vector (``named_parameters`` order)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def set_flat(model: nn.Module, flat: torch.Tensor) -> nn.Module:
    """Load ``flat`` into ``model``'s parameters in place; returns the model."""
    total = sum(p.numel() for p in model.parameters())
    if flat.numel() != total:
        raise ValueError(f"parameter vector has {flat.numel()} entries, model needs {total}")
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n
    return model


def parameter_slices(model: nn.Module) -> dict[str, slice]:
    """Name → slice of the flat vector (for declared parameter groups)."""
    out, offset = {}, 0
    for name, p in model.named_parameters():
        out[name] = slice(offset, offset + p.numel())
        offset += p.numel()
    return out
