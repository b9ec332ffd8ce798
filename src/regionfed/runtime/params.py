"""Flat parameter vectors ⇄ models: the only form in which strategies see a model."""

from __future__ import annotations

import torch
from torch import nn

from regionfed.algorithms.base import ParameterBlock
from regionfed.models.tasks import Task


def get_flat(model: nn.Module) -> torch.Tensor:
    """A detached CPU copy of all parameters as one float vector (``named_parameters``
    order); strategies only ever hold CPU vectors, whatever device the model is on."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).to(
        "cpu", copy=True)


def num_parameters(model: nn.Module) -> int:
    """The length of ``model``'s flat parameter vector."""
    return sum(p.numel() for p in model.parameters())


def set_flat(model: nn.Module, flat: torch.Tensor) -> nn.Module:
    """Load ``flat`` into ``model``'s parameters in place; returns the model."""
    total = num_parameters(model)
    if flat.numel() != total:
        raise ValueError(f"parameter vector has {flat.numel()} entries, model needs {total}")
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n
    return model


def parameter_blocks(model: nn.Module) -> dict[str, ParameterBlock]:
    """Name → where that parameter lies in the flat vector (``named_parameters`` order)."""
    blocks, offset = {}, 0
    for name, p in model.named_parameters():
        blocks[name] = ParameterBlock(name, offset, tuple(p.shape))
        offset += p.numel()
    return blocks


def parameter_slices(model: nn.Module) -> dict[str, slice]:
    """Name → slice of the flat vector."""
    return {name: block.span for name, block in parameter_blocks(model).items()}


def declared_blocks(task: Task, model: nn.Module) -> dict[str, tuple[ParameterBlock, ...]]:
    """The model's declared parameter groups (:meth:`Task.parameter_groups`) as located
    blocks of the flat vector — what a strategy may know about the architecture."""
    blocks = parameter_blocks(model)
    groups = task.parameter_groups(model)
    unknown = [n for names in groups.values() for n in names if n not in blocks]
    if unknown:
        raise ValueError(f"declared parameter groups name unknown parameters: {unknown[:3]}")
    return {group: tuple(blocks[n] for n in names) for group, names in groups.items()}
