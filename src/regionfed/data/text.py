"""Single-label text classification data (e.g. review sentiment) as a federation split."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from regionfed.errors import DataError


@dataclass
class TextDataset:
    """Parallel lists of texts; every list has one entry per example.

    Attributes:
        tokens: the text's tokens (at least one per example).
        label: class index per example (non-negative integers).
        category: the example's category name ("" when unknown).
    """

    tokens: list[list[str]]
    label: np.ndarray
    category: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.label = np.asarray(self.label, dtype=np.int64).reshape(-1)
        n = len(self.tokens)
        if not self.category:
            self.category = [""] * n
        for name in ("label", "category"):
            if len(getattr(self, name)) != n:
                raise DataError(f"text dataset field {name!r} has {len(getattr(self, name))} "
                                f"entries, expected {n}")
        for i, seq in enumerate(self.tokens):
            if not seq:
                raise DataError(f"text {i} has no tokens")
        if n and self.label.min() < 0:
            raise DataError("text labels must be non-negative class indices")

    def __len__(self) -> int:
        return len(self.tokens)

    def subset(self, index: Sequence[int] | np.ndarray) -> TextDataset:
        """The examples at ``index``, in that order."""
        idx = [int(i) for i in index]
        return TextDataset([self.tokens[i] for i in idx],
                           self.label[idx] if idx else np.zeros(0, dtype=np.int64),
                           [self.category[i] for i in idx])

    @classmethod
    def concat(cls, parts: list[TextDataset]) -> TextDataset:
        """All examples of ``parts``, in order."""
        return cls([t for p in parts for t in p.tokens],
                   np.concatenate([p.label for p in parts]) if parts
                   else np.zeros(0, dtype=np.int64),
                   [c for p in parts for c in p.category])
