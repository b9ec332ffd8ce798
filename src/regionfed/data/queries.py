"""Multi-task retail query data: intent (sequence label), spell (token → clean word) and BIO NER.

One example is a query of at most ``MAX_TOKENS`` whitespace tokens. Spell corruption happens
*within* words, so the noisy input, the clean target and the NER tags are always aligned
token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from regionfed.errors import DataError

INTENTS: tuple[str, ...] = (
    "product_search",
    "price_comparison",
    "brand_lookup",
    "category_browse",
    "specific_item",
    "deal_hunting",
    "review_reading",
    "availability_check",
)
ENTITY_TYPES: tuple[str, ...] = ("PRODUCT", "BRAND", "CATEGORY", "MODIFIER", "LOCATION")
NER_TAGS: tuple[str, ...] = ("O",) + tuple(
    f"{prefix}-{etype}" for etype in ENTITY_TYPES for prefix in ("B", "I")
)
MAX_TOKENS = 20


@dataclass
class QueryDataset:
    """Parallel lists of queries; every list has one entry per example.

    Attributes:
        tokens: the noisy input tokens (what the user typed).
        targets: the clean tokens (spell target; may use the region's spelling).
        ner: BIO tags aligned with ``tokens``.
        intent: intent label index into :data:`INTENTS`.
        source: the tokens before spell corruption (input spelling, uncorrupted).
        category: product-category name of the query.
        template: id of the template that produced the query ("" for real data).
        region: the region whose conventions labelled the query.
    """

    tokens: list[list[str]]
    targets: list[list[str]]
    ner: list[list[str]]
    intent: np.ndarray
    source: list[list[str]] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    template: list[str] = field(default_factory=list)
    region: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.intent = np.asarray(self.intent, dtype=np.int64)
        n = len(self.tokens)
        if not self.source:
            self.source = [list(t) for t in self.tokens]
        for name in ("category", "template", "region"):
            if not getattr(self, name):
                setattr(self, name, [""] * n)
        for name in ("targets", "ner", "intent", "source", "category", "template", "region"):
            if len(getattr(self, name)) != n:
                raise DataError(f"query dataset field {name!r} has {len(getattr(self, name))} "
                                f"entries, expected {n}")
        tag_set = set(NER_TAGS)
        for i in range(n):
            k = len(self.tokens[i])
            if k == 0 or k > MAX_TOKENS:
                raise DataError(f"query {i} has {k} tokens; expected 1..{MAX_TOKENS}")
            if len(self.targets[i]) != k or len(self.ner[i]) != k or len(self.source[i]) != k:
                raise DataError(f"query {i}: tokens, targets, source and ner tags differ in length")
            bad = [t for t in self.ner[i] if t not in tag_set]
            if bad:
                raise DataError(f"query {i}: unknown NER tag {bad[0]!r}")
        if n and (self.intent.min() < 0 or self.intent.max() >= len(INTENTS)):
            raise DataError(f"intent labels must be in 0..{len(INTENTS) - 1}")

    def __len__(self) -> int:
        return len(self.tokens)

    def subset(self, index: Sequence[int] | np.ndarray) -> QueryDataset:
        idx = [int(i) for i in index]
        return QueryDataset(
            tokens=[self.tokens[i] for i in idx],
            targets=[self.targets[i] for i in idx],
            ner=[self.ner[i] for i in idx],
            intent=self.intent[idx] if idx else np.zeros(0, dtype=np.int64),
            source=[self.source[i] for i in idx],
            category=[self.category[i] for i in idx],
            template=[self.template[i] for i in idx],
            region=[self.region[i] for i in idx],
        )

    @classmethod
    def concat(cls, parts: list[QueryDataset]) -> QueryDataset:
        return cls(
            tokens=[t for p in parts for t in p.tokens],
            targets=[t for p in parts for t in p.targets],
            ner=[t for p in parts for t in p.ner],
            intent=np.concatenate([p.intent for p in parts]) if parts else np.zeros(0, np.int64),
            source=[t for p in parts for t in p.source],
            category=[t for p in parts for t in p.category],
            template=[t for p in parts for t in p.template],
            region=[t for p in parts for t in p.region],
        )

    def words(self) -> set[str]:
        """Every word that occurs as an input or a target."""
        out: set[str] = set()
        for seq in self.tokens:
            out.update(seq)
        for seq in self.targets:
            out.update(seq)
        return out
