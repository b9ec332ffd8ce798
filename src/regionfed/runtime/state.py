"""Object state ⇄ (JSON tree, tensors): what a round checkpoint stores of a strategy, its
clients and the privacy ledger, without pickle.

:func:`capture` walks an object's attributes (``vars``) and turns them into a JSON-able tree
whose tensors are replaced by references into one flat ``{name: tensor}`` map (stored as
safetensors). :func:`restore` writes such a tree back into a live object of the same type
— built the same way, from the same configuration — in place. Supported values: ``None``,
bools, numbers, strings, slices, tensors, numpy arrays and scalars, numpy and torch random
generators, lists, tuples, dicts (any hashable keys of those kinds), ``nn.Module`` and
``torch.optim.Optimizer`` (their state dicts), and plain objects with a ``__dict__``
(recursively). Configuration (pydantic models) and the federation's public structure
(:class:`FederationView`) are rebuilt from the configuration, not stored. Anything else is
a :class:`CheckpointError` naming the attribute, never a silently missing field.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel
from torch import nn

from regionfed.errors import RegionFedError


class CheckpointError(RegionFedError):
    """A checkpoint that cannot be written or used (corrupt, mismatched, unsupported)."""


def _skipped(value: Any) -> bool:
    """Rebuilt from the configuration (pydantic models, the federation's public structure)
    or code (functions, classes), never stored."""
    from regionfed.algorithms.base import FederationView

    return isinstance(value, BaseModel | FederationView | type | types.FunctionType
                      | types.MethodType | types.BuiltinFunctionType | functools.partial)


class _Writer:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        #: a tensor object met more than once (e.g. one initial model every client holds
        #: as its personal start) is written once: id → (its name, the object — kept alive,
        #: so no later temporary can reuse its id)
        self._seen: dict[int, tuple[str, torch.Tensor]] = {}

    def tensor(self, value: torch.Tensor) -> str:
        if (seen := self._seen.get(id(value))) is not None:
            return seen[0]
        name = f"t{len(self.tensors)}"
        self.tensors[name] = value.detach().cpu().contiguous().clone()
        self._seen[id(value)] = (name, value)
        return name

    def value(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, np.generic):
            return {"__np_scalar__": value.item(), "dtype": str(value.dtype)}
        if isinstance(value, torch.Tensor):
            return {"__tensor__": self.tensor(value)}
        if isinstance(value, np.ndarray):
            return {"__ndarray__": self.tensor(torch.from_numpy(np.ascontiguousarray(value)))}
        if isinstance(value, np.random.Generator):
            return {"__np_generator__": _jsonable_state(value.bit_generator.state)}
        if isinstance(value, torch.Generator):
            return {"__torch_generator__": self.tensor(value.get_state())}
        if isinstance(value, nn.Module | torch.optim.Optimizer):
            return {"__state_dict__": self.value(value.state_dict(), where)}
        if isinstance(value, slice):
            return {"__slice__": [value.start, value.stop, value.step]}
        if isinstance(value, tuple):
            return {"__tuple__": [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.value(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {"__dict__": [[self.value(k, f"{where} key"), self.value(v, f"{where}[{k!r}]")]
                                 for k, v in value.items()]}
        if hasattr(value, "__dict__") and not isinstance(value, type):
            return {"__object__": self.attributes(value, where)}
        raise CheckpointError(f"cannot checkpoint {where}: unsupported type "
                              f"{type(value).__name__}")

    def attributes(self, obj: Any, where: str) -> dict[str, Any]:
        return {name: self.value(v, f"{where}.{name}") for name, v in vars(obj).items()
                if not _skipped(v)}


def _jsonable_state(state: Any) -> Any:
    if isinstance(state, dict):
        return {k: _jsonable_state(v) for k, v in state.items()}
    if isinstance(state, np.integer):
        return int(state)
    return state


def capture(obj: Any, where: str = "state") -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON tree of ``obj``'s attributes, tensors) — see the module docstring."""
    writer = _Writer()
    return writer.attributes(obj, where), writer.tensors


def capture_value(value: Any, where: str = "value"
                  ) -> tuple[Any, dict[str, torch.Tensor]]:
    """(JSON tree, tensors) of one value (a dict of client states, a history list, …)."""
    writer = _Writer()
    return writer.value(value, where), writer.tensors


def load_value(tree: Any, tensors: dict[str, torch.Tensor], current: Any = None,
               where: str = "value") -> Any:
    """The value a tree describes; live objects (``current``: modules, optimizers, plain
    objects, generators) are updated in place and returned."""
    if tree is None or isinstance(tree, bool | int | float | str):
        return tree
    if isinstance(tree, list):
        olds = current if isinstance(current, list) and len(current) == len(tree) else \
            [None] * len(tree)
        return [load_value(v, tensors, old, f"{where}[{i}]")
                for i, (v, old) in enumerate(zip(tree, olds, strict=True))]
    if not isinstance(tree, dict) or len(tree) == 0:
        raise CheckpointError(f"checkpoint entry {where} is malformed")
    kind = next(iter(tree))
    body = tree[kind]
    try:
        if kind == "__np_scalar__":
            return np.dtype(tree["dtype"]).type(body)
        if kind == "__tensor__":
            return tensors[body].clone()
        if kind == "__ndarray__":
            return tensors[body].numpy().copy()
        if kind == "__np_generator__":
            generator = current if isinstance(current, np.random.Generator) else \
                np.random.default_rng()
            generator.bit_generator.state = body
            return generator
        if kind == "__torch_generator__":
            generator = current if isinstance(current, torch.Generator) else torch.Generator()
            generator.set_state(tensors[body])
            return generator
        if kind == "__state_dict__":
            if not isinstance(current, nn.Module | torch.optim.Optimizer):
                raise CheckpointError(f"checkpoint entry {where}: the object to load a state "
                                      "dict into is missing")
            current.load_state_dict(load_value(body, tensors, None, where))
            return current
        if kind == "__slice__":
            return slice(*body)
        if kind == "__tuple__":
            return tuple(load_value(v, tensors, None, f"{where}[{i}]")
                         for i, v in enumerate(body))
        if kind == "__dict__":
            out = {}
            for key_tree, value_tree in body:
                key = load_value(key_tree, tensors, None, f"{where} key")
                old = current.get(key) if isinstance(current, dict) else None
                out[key] = load_value(value_tree, tensors, old, f"{where}[{key!r}]")
            return out
        if kind == "__object__":
            if current is None or not hasattr(current, "__dict__"):
                raise CheckpointError(f"checkpoint entry {where}: the object to restore "
                                      "into is missing")
            restore(current, body, tensors, where)
            return current
    except KeyError as exc:
        raise CheckpointError(f"checkpoint entry {where} refers to a missing tensor "
                              f"{exc}") from None
    raise CheckpointError(f"checkpoint entry {where} has an unknown kind {kind!r}")


def restore(obj: Any, tree: dict[str, Any], tensors: dict[str, torch.Tensor],
            where: str = "state") -> None:
    """Write a :func:`capture` tree back into ``obj`` (same type, built the same way)."""
    for name, value_tree in tree.items():
        # object.__setattr__: frozen dataclasses are restored in place too
        object.__setattr__(obj, name, load_value(value_tree, tensors, getattr(obj, name, None),
                                                 f"{where}.{name}"))
