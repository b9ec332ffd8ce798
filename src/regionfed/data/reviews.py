"""Amazon product reviews (e.g. McAuley et al.'s Amazon review data) as a 5-class sentiment
federation whose regions are the product categories.

Input: JSON lines, one review object per line (blank lines are skipped). Fields, each under
either name:

* text — ``text`` or ``reviewText`` (a string);
* rating — ``rating`` or ``overall`` (a number in 1..5 with an integral value: 4 and 4.0
  are fine, 4.5 and ``"4"`` are not);
* category — ``category`` or ``main_cat`` (a non-empty string).

One example per review: its lowercased whitespace tokens, truncated to ``max_tokens``
(reviews without tokens are skipped and counted); label = rating − 1. With ``max_reviews``
only the first that many usable reviews (in file order, after the ``regions`` filter) are
read. Each category is a region; per region the reviews are split into train / val / test
and dealt to ``clients_per_region`` clients with Dirichlet(``alpha_d``) label skew
(:func:`regionfed.data.partition.region_client_splits`).

Errors (:class:`~regionfed.errors.DataError`, naming the file and the line): unreadable
file, invalid JSON, a line that is not an object, a missing or mistyped field, a rating out
of range, too few reviews in a region.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from regionfed.data.federation import ClientData, Federation
from regionfed.data.partition import region_client_splits
from regionfed.data.text import TextDataset
from regionfed.errors import DataError, config_error_from_validation

NUM_CLASSES = 5
#: accepted names of each field, in order of preference
FIELD_NAMES: dict[str, tuple[str, ...]] = {"text": ("text", "reviewText"),
                                           "rating": ("rating", "overall"),
                                           "category": ("category", "main_cat")}


class ReviewsConfig(BaseModel):
    """Where the review data is and how it becomes a federation."""

    model_config = ConfigDict(extra="forbid")

    #: a JSON-lines file of reviews (no default: there is no shared copy)
    path: str | None = None
    clients_per_region: int = Field(4, ge=1)
    alpha_d: float = Field(0.3, gt=0.0)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    seed: int = Field(0, ge=0)
    max_tokens: int = Field(64, ge=1)
    #: read at most this many reviews (the first, in file order); None = all
    max_reviews: int | None = Field(None, ge=1)
    #: keep only these categories (regions); None = every category
    regions: list[str] | None = Field(None, min_length=1)


def _field(record: dict[str, Any], name: str, where: str) -> Any:
    for key in FIELD_NAMES[name]:
        if key in record:
            return record[key]
    raise DataError(f"{where}: missing field {name!r} (accepted names: "
                    f"{', '.join(FIELD_NAMES[name])})")


def parse_review(record: Any, where: str) -> tuple[str, int, str]:
    """``(text, label, category)`` of one decoded JSON line; DataError naming ``where``."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    text = _field(record, "text", where)
    rating = _field(record, "rating", where)
    category = _field(record, "category", where)
    if not isinstance(text, str):
        raise DataError(f"{where}: text must be a string, got {type(text).__name__}")
    if isinstance(rating, bool) or not isinstance(rating, int | float):
        raise DataError(f"{where}: rating must be a number, got {rating!r}")
    if not (1 <= rating <= NUM_CLASSES and float(rating).is_integer()):
        raise DataError(f"{where}: rating {rating!r} is not an integer in 1..{NUM_CLASSES}")
    if not isinstance(category, str) or not category.strip():
        raise DataError(f"{where}: category must be a non-empty string, got {category!r}")
    return text, int(rating) - 1, category.strip()


def read_reviews(config: ReviewsConfig) -> tuple[TextDataset, dict[str, int]]:
    """Every usable review of ``config.path`` as one dataset, plus counts (lines, kept,
    skipped empty texts, filtered out by ``regions``)."""
    if config.path is None:
        raise DataError("the reviews dataset needs data.path: a JSON-lines file with text, "
                        "rating and category per review")
    path = Path(config.path)
    if not path.exists():
        raise DataError(f"reviews file not found at {path}")
    if not path.is_file():
        raise DataError(f"{path} is not a file (expected a JSON-lines file of reviews)")
    keep = set(config.regions) if config.regions is not None else None
    tokens: list[list[str]] = []
    labels: list[int] = []
    categories: list[str] = []
    counts = Counter(lines=0, empty=0, filtered=0)
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if config.max_reviews is not None and len(tokens) >= config.max_reviews:
                    break
                if not line.strip():
                    continue
                counts["lines"] += 1
                where = f"{path}, line {number}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{where}: invalid JSON ({exc.msg})") from None
                text, label, category = parse_review(record, where)
                if keep is not None and category not in keep:
                    counts["filtered"] += 1
                    continue
                words = text.lower().split()[:config.max_tokens]
                if not words:
                    counts["empty"] += 1
                    continue
                tokens.append(words)
                labels.append(label)
                categories.append(category)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not a readable utf-8 text file ({exc})") from None
    counts["kept"] = len(tokens)
    return TextDataset(tokens, np.array(labels, dtype=np.int64), categories), dict(counts)


def make_reviews_config(config: ReviewsConfig | Mapping[str, Any] | None = None,
                        **overrides: Any) -> ReviewsConfig:
    """Validate a configuration (a :class:`ReviewsConfig`, a mapping or keyword overrides);
    invalid values raise :class:`regionfed.errors.ConfigError` naming the field."""
    base = config.model_dump() if isinstance(config, ReviewsConfig) else dict(config or {})
    try:
        return ReviewsConfig.model_validate({**base, **overrides})
    except ValidationError as exc:
        raise config_error_from_validation(exc, "reviews config") from None


def load_reviews(config: ReviewsConfig | Mapping[str, Any] | None = None,
                 **overrides: Any) -> Federation:
    """The reviews federation of ``config`` (see the module docstring).

    Returns ``Federation(name="reviews")``: one region per category (sorted), clients
    ``<category>/c<k>``, every split a :class:`TextDataset`. ``meta`` holds ``source``
    (path and counts), ``num_classes`` (5), ``max_tokens`` and the split sizes.
    Deterministic in ``seed``.
    """
    cfg = make_reviews_config(config, **overrides)
    data, counts = read_reviews(cfg)
    if not len(data):
        raise DataError(f"{cfg.path}: no usable review (lines read: {counts['lines']})")
    names = sorted(set(data.category))
    if cfg.regions is not None:
        absent = [r for r in cfg.regions if r not in names]
        if absent:
            raise DataError(f"{cfg.path}: no review of the category(ies) "
                            f"{', '.join(map(repr, absent))} (regions); found: "
                            f"{', '.join(names)}")
    rng = np.random.default_rng(cfg.seed)
    k = cfg.clients_per_region
    clients = []
    for region in names:
        members = np.array([i for i, c in enumerate(data.category) if c == region])
        if len(members) < k + 1:
            raise DataError(f"{cfg.path}: region (category) {region!r} has {len(members)} "
                            f"reviews, too few for {k} clients (at least {k + 1}: a training "
                            "review per client and a test review); lower clients_per_region "
                            "or drop it with regions")
        splits = region_client_splits(rng, data.label[members], k, cfg.alpha_d,
                                      cfg.val_fraction, cfg.test_fraction)
        for j, (train, val, test) in enumerate(splits):
            clients.append(ClientData(f"{region}/c{j:03d}", region,
                                      data.subset(members[train]), data.subset(members[val]),
                                      data.subset(members[test])))
    meta = {
        "source": {"path": cfg.path, **counts},
        "config": cfg.model_dump(),
        "num_classes": NUM_CLASSES,
        "max_tokens": cfg.max_tokens,
        "split_sizes": {s: sum(len(c.split(s)) for c in clients) for s in
                        ("train", "val", "test")},
    }
    return Federation(name="reviews", regions=names, clients=clients, meta=meta)
