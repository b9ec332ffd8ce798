"""Local training on one dataset: the client step every strategy builds on.

``E`` epochs of mini-batch training with a fresh optimizer (SGD or AdamW, as configured)
starting from given parameters. Strategies that change the local objective (FedProx's
proximal term, Ditto, …) pass an ``extra_loss`` of the current model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from regionfed.errors import NumericalError
from regionfed.models.tasks import Task, device_of, to_device
from regionfed.runtime.params import set_flat


class OptimizerConfig(BaseModel):
    """The local (client) optimizer."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["sgd", "adamw"] = "adamw"
    lr: float = Field(3e-3, gt=0)
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


def has_fused_kernels(tensors: list[torch.Tensor]) -> bool:
    """Whether torch's fused SGD/AdamW kernels take every tensor (floats on CPU or CUDA)."""
    return all(t.is_floating_point() and t.device.type in ("cpu", "cuda") for t in tensors)


#: torch.optim.AdamW's β and ε (the only ones we use)
ADAMW_BETAS = (0.9, 0.999)
ADAMW_EPS = 1e-8


class FusedAdamW:
    """``torch.optim.AdamW(params, lr, weight_decay=λ, fused=True)`` as a plain object: the
    same moments and torch's fused AdamW kernel on them, so every step is bit-identical
    (tested) — without the ``Optimizer`` class's per-step bookkeeping (hooks, grouping,
    state lookups) or its float32 step counter per tensor, which costs a small add (and a
    copy) per tensor and step: here one step-count tensor serves every tensor at the same
    count. On the tiny model's 43 tensors a step takes ~0.15 ms against ~0.30 ms through
    ``torch.optim`` (one thread): a client step 3.69 → 3.50 ms. Tensors whose ``grad`` is
    None are skipped and their count stays, as ``torch.optim`` does. For tensors on one
    device with one dtype (:func:`make_optimizer` checks)."""

    def __init__(self, params: list[torch.Tensor], lr: float, weight_decay: float) -> None:
        self.params = list(params)
        self.lr, self.weight_decay = lr, weight_decay
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format)
                        for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format)
                           for p in self.params]
        #: updates each tensor has had (torch.optim's ``state[p]["step"]``)
        self.counts = [0] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        by_count: dict[int, list[int]] = {}
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self.counts[i] += 1
                by_count.setdefault(self.counts[i], []).append(i)
        for count, live in by_count.items():
            fused_adamw_step([self.params[i] for i in live],
                             [self.params[i].grad for i in live],
                             [self.exp_avg[i] for i in live],
                             [self.exp_avg_sq[i] for i in live],
                             count, self.lr, self.weight_decay)


def fused_adamw_step(params: list[torch.Tensor], grads: list[torch.Tensor],
                     exp_avg: list[torch.Tensor], exp_avg_sq: list[torch.Tensor], count: int,
                     lr: float, weight_decay: float) -> None:
    """torch's fused AdamW kernel, in place, on tensors (one device, one dtype) that all take
    their ``count``-th update (1-based): θ ← θ(1 − ηλ), m ← β₁m + (1 − β₁)g,
    v ← β₂v + (1 − β₂)g², θ ← θ − η/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε) — what
    ``torch.optim.AdamW(fused=True)`` computes, with one step-count tensor for all."""
    if not params:
        return
    step = torch.tensor(float(count), dtype=torch.float32, device=params[0].device)
    torch._fused_adamw_(params, grads, exp_avg, exp_avg_sq, [], [step] * len(params),
                        lr=lr, beta1=ADAMW_BETAS[0], beta2=ADAMW_BETAS[1],
                        weight_decay=weight_decay, eps=ADAMW_EPS, amsgrad=False,
                        maximize=False)


def make_optimizer(params: Any, config: OptimizerConfig
                   ) -> torch.optim.Optimizer | FusedAdamW:
    """A fresh SGD or AdamW over ``params`` (only its ``step()`` is used).

    Fused kernels (one kernel per tensor for the whole update) where torch has them for
    every tensor — floating point, on the CPU or CUDA —, else the ``foreach`` loop. Same
    update rule; on the tiny model a fused AdamW step takes ~0.3 ms against ~0.9 ms
    (43 small tensors, one thread), and results differ only in the last bits. A fused AdamW
    is :class:`FusedAdamW` (the same step without ``torch.optim``'s per-step overhead).
    """
    params = list(params)
    fused = has_fused_kernels(params)
    if config.name == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay,
                               **({"fused": True} if fused else {"foreach": True}))
    if fused and len({(p.device, p.dtype) for p in params}) == 1:
        return FusedAdamW(params, config.lr, config.weight_decay)
    if fused:
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay,
                                 fused=True)
    return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay,
                             foreach=True)


def train_local(task: Task, model: nn.Module, start: torch.Tensor, prepared: Any, *,
                epochs: int, batch_size: int, optimizer: OptimizerConfig,
                generator: torch.Generator,
                extra_loss: Callable[[nn.Module], torch.Tensor] | None = None,
                trainable: torch.Tensor | None = None,
                mixing: tuple[float, torch.Tensor] | None = None,
                max_steps: int | None = None,
                ) -> tuple[torch.Tensor, float]:
    """Train from flat ``start`` for ``epochs`` epochs; return (new flat params, mean loss).

    Options (all off by default; see :meth:`ClientContext.train`):

    * ``trainable``: a bool mask over the flat vector; masked-out entries are frozen and come
      back bit-identical (FedBABU's head, FedRep's alternating body/head updates);
    * ``mixing = (a, b)``: the trained vector θ is not the model itself: the model computes
      with ``a·θ + b`` and θ gets ∂loss/∂θ = a·∂loss/∂(aθ + b) (APFL's v trained through
      the mixture α·v + (1 − α)·w, Deng et al. 2020, Alg. 1 line 7);
    * ``max_steps``: stop after this many optimizer steps (pFedMe's K inner steps).

    Switches PyTorch to deterministic kernels (process-wide): the CPU embedding backward
    otherwise accumulates in thread order, and the same seed must give the same run.

    The model may live on an accelerator (``training.device``): ``start`` and the masks are
    copied there, every batch is moved there, and the result comes back as a CPU vector.
    """
    device = device_of(model)
    deterministic(device)
    start = start.to(device)
    set_flat(model, start)
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    # the optimizer's tensors: the model's own parameters, or (mixing) separate θ leaves
    # that the model sees as a·θ + b
    if mixing is None:
        leaves = params
    else:
        scale, offset = mixing
        leaves = [t.view_as(p).clone().requires_grad_(True)
                  for t, p in zip(start.detach().split(sizes), params, strict=True)]
        offsets = [t.view_as(p) for t, p in zip(offset.to(device).split(sizes), params,
                                                strict=True)]
        set_flat(model, scale * start + offset)
    # (leaf, frozen entries, their values) for every tensor with a frozen entry
    frozen = []
    if trainable is not None:
        for leaf, keep, init in zip(leaves, trainable.to(device, torch.bool).split(sizes),
                                    start.split(sizes), strict=True):
            if not keep.all():
                frozen.append((leaf, ~keep.view_as(leaf), init.view_as(leaf).clone()))
    opt = make_optimizer(leaves, optimizer)
    model.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        for batch in task.batches(prepared, batch_size, generator):
            if max_steps is not None and steps >= max_steps:
                break
            for p in params:  # model.zero_grad without walking the module tree each step
                p.grad = None  # (mixing leaves get their grad assigned below)
            loss = task.loss(model, to_device(batch, device))
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            value = float(loss.detach())  # read once: the check and the mean (no extra op)
            if not math.isfinite(value):
                raise NumericalError(f"local training produced a non-finite loss ({value})")
            loss.backward()
            if mixing is not None:
                for leaf, p in zip(leaves, params, strict=True):
                    leaf.grad = None if p.grad is None else scale * p.grad
            opt.step()
            with torch.no_grad():
                for leaf, mask, init in frozen:
                    leaf[mask] = init[mask]  # frozen entries stay exactly as they came
                if mixing is not None:
                    for leaf, p, off in zip(leaves, params, offsets, strict=True):
                        p.copy_(scale * leaf + off)
            total += value
            steps += 1
    model.zero_grad(set_to_none=True)
    out = torch.cat([leaf.detach().reshape(-1) for leaf in leaves]).to("cpu", copy=True)
    return out, total / max(steps, 1)


def steps_per_epoch(task: Task, prepared: Any, batch_size: int) -> int:
    """Optimizer steps in one local epoch (⌈n / B⌉)."""
    return -(-task.num_examples(prepared) // batch_size)


def mean_gradient(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
                  batch_size: int) -> torch.Tensor:
    """∇ of the mean training loss at ``params`` (one full pass, batches weighted by size)."""
    device = device_of(model)
    deterministic(device)
    set_flat(model, params)
    model.train()
    model.zero_grad(set_to_none=True)
    n = task.num_examples(prepared)
    for batch in task.batches(prepared, batch_size, None):
        (task.loss(model, to_device(batch, device)) * (task.batch_size_of(batch) / n)
         ).backward()
    grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return grad.detach().to("cpu", copy=True)


#: examples per forward pass when a whole split is scored (no gradients)
EVAL_BATCH_SIZE = 512


def example_losses(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
                   batch_size: int = EVAL_BATCH_SIZE) -> torch.Tensor:
    """The loss of every example of ``prepared`` under ``params`` (e.g. a validation split)."""
    return batch_losses(task, model, params, task.batches(prepared, batch_size, None))


@torch.no_grad()
def batch_losses(task: Task, model: nn.Module, params: torch.Tensor, batches: Iterable[Any]
                 ) -> torch.Tensor:
    """The loss of every example of ``batches`` (in order) under ``params``: for a caller
    that scores many models on the same data and keeps its batches."""
    set_flat(model, params)
    was_training = model.training
    model.eval()
    device = device_of(model)
    parts = [task.example_losses(model, to_device(batch, device)).cpu() for batch in batches]
    model.train(was_training)
    return torch.cat(parts) if parts else torch.zeros(0)


def loss_sum(task: Task, model: nn.Module, params: torch.Tensor, prepared: Any,
             batch_size: int = EVAL_BATCH_SIZE) -> tuple[float, int]:
    """(Σ per-example loss, n) of ``params`` on ``prepared``."""
    losses = example_losses(task, model, params, prepared, batch_size)
    return float(losses.sum()), int(losses.numel())


def deterministic(device: torch.device) -> None:
    """Deterministic kernels; on CUDA, ops without a deterministic kernel only warn (cuBLAS
    needs its workspace setting, which must precede the first CUDA call).

    Without torch's NaN-filling of every new uninitialized tensor, which deterministic mode
    turns on as a debugging aid: no kernel we run reads memory it has not written, and the
    fill is ~190 extra small ops per tiny-model step (a few % of it on one thread)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=device.type != "cpu")
    torch.utils.deterministic.fill_uninitialized_memory = False
