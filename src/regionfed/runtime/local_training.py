"""Local training on one dataset: the client step every strategy builds on.

``E`` epochs of mini-batch training with a fresh optimizer (SGD or AdamW, as configured)
starting from given parameters. Strategies that change the local objective (FedProx's
proximal term, Ditto, …) pass an ``extra_loss`` of the current model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from regionfed.errors import NumericalError
from regionfed.models.tasks import Task
from regionfed.runtime.params import get_flat, set_flat


class OptimizerConfig(BaseModel):
    """The local (client) optimizer."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["sgd", "adamw"] = "adamw"
    lr: float = Field(3e-3, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


def make_optimizer(params: Any, config: OptimizerConfig) -> torch.optim.Optimizer:
    if config.name == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay, foreach=True)
    return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay,
                             foreach=True)


def train_local(task: Task, model: nn.Module, start: torch.Tensor, prepared: Any, *,
                epochs: int, batch_size: int, optimizer: OptimizerConfig,
                generator: torch.Generator,
                extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, float]:
    """Train from flat ``start`` for ``epochs`` epochs; return (new flat params, mean loss).

    Switches PyTorch to deterministic kernels (process-wide): the CPU embedding backward
    otherwise accumulates in thread order, and the same seed must give the same run.
    """
    torch.use_deterministic_algorithms(True)
    set_flat(model, start)
    model.train()
    opt = make_optimizer(model.parameters(), optimizer)
    total, steps = 0.0, 0
    for _ in range(epochs):
        for batch in task.batches(prepared, batch_size, generator):
            opt.zero_grad(set_to_none=True)
            loss = task.loss(model, batch)
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            if not torch.isfinite(loss):
                raise NumericalError(f"local training produced a non-finite loss ({loss.item()})")
            loss.backward()
            opt.step()
            total += float(loss.detach())
            steps += 1
    return get_flat(model), total / max(steps, 1)



def mean_gradient(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
                  batch_size: int) -> torch.Tensor:
    """∇ of the mean training loss at ``params`` (one full pass, batches weighted by size)."""
    torch.use_deterministic_algorithms(True)
    set_flat(model, params)
    model.train()
    model.zero_grad(set_to_none=True)
    n = task.num_examples(prepared)
    for batch in task.batches(prepared, batch_size, None):
        (task.loss(model, batch) * (task.batch_size_of(batch) / n)).backward()
    grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return grad.detach().clone()


@torch.no_grad()
def example_losses(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
                   batch_size: int = 512) -> torch.Tensor:
    """The loss of every example of ``prepared`` under ``params`` (e.g. a validation split)."""
    set_flat(model, params)
    was_training = model.training
    model.eval()
    parts = [task.example_losses(model, batch)
             for batch in task.batches(prepared, batch_size, None)]
    model.train(was_training)
    return torch.cat(parts) if parts else torch.zeros(0)


def loss_sum(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
             batch_size: int = 512) -> tuple[float, int]:
    """(Σ per-example loss, n) of ``params`` on ``prepared``."""
    losses = example_losses(task, model, params, prepared, batch_size)
    return float(losses.sum()), int(losses.numel())
