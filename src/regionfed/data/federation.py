"""The federation data model: regions → clients → per-client train / val / test splits.

A federation is task-agnostic: each split is whatever dataset object the task understands
(for the query benchmark a :class:`regionfed.data.queries.QueryDataset`). Algorithms never
look inside a split; they only see client ids, regions and example counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from regionfed.errors import DataError

SPLITS = ("train", "val", "test")


class SizedDataset(Protocol):
    def __len__(self) -> int: ...


@dataclass
class ClientData:
    """One client (user/device): its region and its private splits."""

    client_id: str
    region: str
    train: Any
    val: Any
    test: Any

    def split(self, name: str) -> Any:
        if name not in SPLITS:
            raise DataError(f"unknown split {name!r}; expected one of {', '.join(SPLITS)}")
        return getattr(self, name)

    @property
    def num_train(self) -> int:
        return len(self.train)


@dataclass
class Federation:
    """Regions, their clients, and free-form metadata about how the data was made."""

    name: str
    regions: list[str]
    clients: list[ClientData]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.regions:
            raise DataError(f"federation {self.name!r} has no regions")
        if len(set(self.regions)) != len(self.regions):
            raise DataError(f"federation {self.name!r} has duplicate region names")
        ids = [c.client_id for c in self.clients]
        if len(set(ids)) != len(ids):
            raise DataError(f"federation {self.name!r} has duplicate client ids")
        known = set(self.regions)
        for c in self.clients:
            if c.region not in known:
                raise DataError(f"client {c.client_id!r} is in unknown region {c.region!r}")
        for r in self.regions:
            if not any(c.region == r for c in self.clients):
                raise DataError(f"region {r!r} of federation {self.name!r} has no clients")

    def clients_in(self, region: str) -> list[ClientData]:
        if region not in self.regions:
            raise DataError(
                f"unknown region {region!r}; this federation has: {', '.join(self.regions)}"
            )
        return [c for c in self.clients if c.region == region]

    def region_of(self, client_id: str) -> str:
        for c in self.clients:
            if c.client_id == client_id:
                return c.region
        raise DataError(f"unknown client {client_id!r}")

    def __iter__(self) -> Iterator[ClientData]:
        return iter(self.clients)

    def num_examples(self, split: str = "train") -> int:
        return sum(len(c.split(split)) for c in self.clients)

    def region_sizes(self, split: str = "train") -> dict[str, int]:
        return {r: sum(len(c.split(split)) for c in self.clients_in(r)) for r in self.regions}


def concat_splits(parts: Sequence[Any]) -> Any:
    """Concatenate datasets of the same type (each dataset type provides ``concat``)."""
    if not parts:
        raise DataError("nothing to concatenate")
    return type(parts[0]).concat(list(parts))
