"""Amazon product reviews (e.g. McAuley et al.'s Amazon review data) as a 5-class sentiment
federation whose regions are the product categories.

Input (``data.path``): one review file, or a folder of them (every ``*.json``, ``*.jsonl``,
``*.json.gz`` and ``*.jsonl.gz`` in it, in name order) — the UCSD Amazon Review Data files as
published (2018: ``<Category>_5.json.gz``; 2014: ``reviews_<Category>_5.json.gz``), gzipped
or not, a UTF-8 byte-order mark allowed. One JSON object per line (blank lines are skipped);
fields, each under either name:

* text — ``text`` or ``reviewText`` (a string; a review without it is skipped and counted,
  as is one whose text has no tokens: the UCSD files hold some);
* rating — ``rating`` or ``overall`` (a number in 1..5 with an integral value: 4 and 4.0
  are fine, 4.5 and ``"4"`` are not);
* category — ``category`` or ``main_cat`` (a non-empty string); where a line has neither,
  the file's name (:func:`category_from_file_name`: ``Musical_Instruments_5.json.gz`` →
  ``Musical_Instruments``).

One example per review: its lowercased whitespace tokens, truncated to ``max_tokens``;
label = rating − 1. With ``max_reviews`` a subsample of that many usable reviews (after the
``regions`` filter), stratified by region: each keeps its share (largest remainders), drawn
with ``seed``; ``meta["source"]`` says how many each region had and kept. Each category is
a region; per region the reviews are split into train / val / test — reviews whose token
sequences are equal always in the same split, across categories too
(:func:`~regionfed.data.partition.leak_free_holdouts`: UCSD 5-core files repeat texts a lot,
and a random split would test on training texts; counted in ``duplicate_texts``) — and
dealt to ``clients_per_region`` clients with Dirichlet(``alpha_d``) label skew
(:func:`regionfed.data.partition.region_client_splits`) — or, with ``client_key``
``reviewer`` / ``product``, each reviewer's (``reviewerID``) or product's (``asin``) reviews
in a category are one client (the ``clients_per_region`` with the most reviews), split
leak-free within it; those without two distinct texts are dropped
(``clients_too_small``).

Errors (:class:`~regionfed.errors.DataError`, naming the file and the line): unreadable
file, invalid JSON, a line that is not an object, a missing or mistyped field, a rating out
of range, too few reviews in a region, a ``regions`` name no file has (the valid ones
listed).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from regionfed.data.federation import ClientData, Federation
from regionfed.data.partition import (
    TEST,
    TRAIN,
    VAL,
    duplicate_groups,
    leak_free_holdouts,
    region_client_splits,
    repeated_texts,
    split_counts,
)
from regionfed.data.text import TextDataset
from regionfed.errors import DataError, config_error_from_validation

NUM_CLASSES = 5
#: accepted names of each field, in order of preference
FIELD_NAMES: dict[str, tuple[str, ...]] = {"text": ("text", "reviewText"),
                                           "rating": ("rating", "overall"),
                                           "category": ("category", "main_cat"),
                                           "reviewer": ("reviewerID", "reviewer_id"),
                                           "product": ("asin", "product_id")}
#: the names review files have (a folder's other files are ignored)
REVIEW_SUFFIXES = (".json.gz", ".jsonl.gz", ".json", ".jsonl")


class ReviewsConfig(BaseModel):
    """Where the review data is and how it becomes a federation."""

    model_config = ConfigDict(extra="forbid")

    #: a JSON-lines review file or a folder of them (no default: there is no shared copy)
    path: str | None = None
    clients_per_region: int = Field(4, ge=1)
    alpha_d: float = Field(0.3, gt=0.0)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    seed: int = Field(0, ge=0)
    max_tokens: int = Field(64, ge=1)
    #: keep at most this many reviews, stratified by region (seeded); None = all
    max_reviews: int | None = Field(None, ge=1)
    #: keep only these categories (regions); None = every category
    regions: list[str] | None = Field(None, min_length=1)
    #: who the clients are: ``random`` — ``clients_per_region`` clients per category with
    #: Dirichlet(``alpha_d``) label skew; ``reviewer`` / ``product`` — one client per
    #: reviewerID / asin within its category (the ``clients_per_region`` with the most
    #: reviews; ``alpha_d`` unused), each needing two distinct texts (train and test)
    client_key: Literal["random", "reviewer", "product"] = "random"


_MISSING = object()


def _field(record: dict[str, Any], name: str, where: str, default: Any = _MISSING) -> Any:
    for key in FIELD_NAMES[name]:
        if key in record:
            return record[key]
    if default is not _MISSING:
        return default
    raise DataError(f"{where}: missing field {name!r} (accepted names: "
                    f"{', '.join(FIELD_NAMES[name])})")


def parse_review(record: Any, where: str, default_category: str | None = None
                 ) -> tuple[str | None, int, str]:
    """``(text, label, category)`` of one decoded JSON line (text ``None`` when the review
    has none; category ``default_category`` when the line has no category field);
    DataError naming ``where``."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    text = _field(record, "text", where, default=None)
    rating = _field(record, "rating", where)
    category = _field(record, "category", where,
                      **({} if default_category is None else {"default": default_category}))
    if text is not None and not isinstance(text, str):
        raise DataError(f"{where}: text must be a string, got {type(text).__name__}")
    if isinstance(rating, bool) or not isinstance(rating, int | float):
        raise DataError(f"{where}: rating must be a number, got {rating!r}")
    if not (1 <= rating <= NUM_CLASSES and float(rating).is_integer()):
        raise DataError(f"{where}: rating {rating!r} is not an integer in 1..{NUM_CLASSES}")
    if not isinstance(category, str) or not category.strip():
        raise DataError(f"{where}: category must be a non-empty string, got {category!r}")
    return text, int(rating) - 1, category.strip()


def category_from_file_name(path: Path) -> str:
    """The category a UCSD review file is named after: its name without the review suffix,
    the 2014 ``reviews_`` prefix and the 5-core ``_5`` marker
    (``reviews_Musical_Instruments_5.json.gz`` → ``Musical_Instruments``)."""
    name = path.name
    suffix = next((s for s in REVIEW_SUFFIXES if name.endswith(s)), path.suffix)
    name = name[:len(name) - len(suffix)] if suffix else name
    return name.removeprefix("reviews_").removesuffix("_5") or path.name


def review_files(path: Path) -> list[Path]:
    """``path`` itself, or the review files of the folder ``path`` (in name order)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and p.name.endswith(REVIEW_SUFFIXES))
        if not files:
            raise DataError(f"{path}: no review file in this folder (expected "
                            f"{', '.join('*' + s for s in REVIEW_SUFFIXES)})")
        return files
    if not path.exists():
        raise DataError(f"reviews file not found at {path}")
    if not path.is_file():
        raise DataError(f"{path} is not a file or folder of reviews")
    return [path]


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text file, gunzipped if its name ends in ``.gz``; a
    byte-order mark is dropped; DataError if it is not readable utf-8 text."""
    try:
        if path.name.endswith(".gz"):
            handle = gzip.open(path, "rt", encoding="utf-8-sig")
        else:
            handle = open(path, encoding="utf-8-sig")
        with handle:
            yield from enumerate(handle, start=1)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        kind = "gzip-compressed utf-8 text" if path.name.endswith(".gz") else "utf-8 text"
        raise DataError(f"{path} is not a readable {kind} file ({exc})") from None


def read_reviews(config: ReviewsConfig) -> tuple[TextDataset, dict[str, Any], list[str]]:
    """Every usable review of ``config.path`` (a file or a folder of them) as one dataset;
    counts: lines, kept, skipped empty texts and reviews without text, filtered out by
    ``regions``, categories taken from a file name, and per category how many usable
    reviews there were (``available``) and were kept after ``max_reviews``; and each
    review's client key (its ``client_key`` field; empty strings for ``random``)."""
    if config.path is None:
        raise DataError("the reviews dataset needs data.path: a JSON-lines file (or a folder "
                        "of them) with text, rating and category per review")
    keep = set(config.regions) if config.regions is not None else None
    tokens: list[list[str]] = []
    labels: list[int] = []
    categories: list[str] = []
    keys: list[str] = []
    counts = Counter(lines=0, empty=0, no_text=0, filtered=0, category_from_file=0)
    seen: set[str] = set()
    for path in review_files(Path(config.path)):
        from_name = category_from_file_name(path)
        for number, line in _numbered_lines(path):
            if not line.strip():
                continue
            counts["lines"] += 1
            where = f"{path}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON ({exc.msg})") from None
            text, label, category = parse_review(record, where, default_category=from_name)
            if not any(k in record for k in FIELD_NAMES["category"]):
                counts["category_from_file"] += 1
            seen.add(category)
            if keep is not None and category not in keep:
                counts["filtered"] += 1
                continue
            if text is None:
                counts["no_text"] += 1
                continue
            words = text.lower().split()[:config.max_tokens]
            if not words:
                counts["empty"] += 1
                continue
            tokens.append(words)
            labels.append(label)
            categories.append(category)
            keys.append(_client_key(record, config.client_key, where))
    if keep is not None and keep - seen:
        absent = sorted(keep - seen)
        raise DataError(f"{config.path}: no review of the category(ies) "
                        f"{', '.join(map(repr, absent))} (regions); the categories are: "
                        f"{', '.join(sorted(seen)) or 'none'}")
    data = TextDataset(tokens, np.array(labels, dtype=np.int64), categories)
    available = Counter(categories)
    if config.max_reviews is not None and len(data) > config.max_reviews:
        chosen = stratified_sample(categories, config.max_reviews, config.seed)
        data, keys = data.subset(chosen), [keys[i] for i in chosen]
    counts["kept"] = len(data)
    return data, {**counts, "available": dict(sorted(available.items())),
                  "kept_per_region": dict(sorted(Counter(data.category).items()))}, keys


def _client_key(record: dict[str, Any], client_key: str, where: str) -> str:
    """The review's reviewer or product id (``client_key``); ``""`` for ``random``."""
    if client_key == "random":
        return ""
    value = _field(record, client_key, where)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {client_key} id must be a non-empty string, got {value!r}")
    return value.strip()


def stratified_sample(groups: list[str], size: int, seed: int) -> np.ndarray:
    """Sorted indices of ``size`` items drawn without replacement so that each group keeps
    its share of ``size`` (:func:`~regionfed.data.partition.split_counts`)."""
    names, inverse = np.unique(np.asarray(groups), return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(len(names))]
    quota = split_counts(size, [len(m) for m in members])
    rng = np.random.default_rng(seed)
    chosen = [rng.choice(m, size=int(q), replace=False) for m, q in zip(members, quota,
                                                                        strict=True)]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


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
    ``<category>/c<k>`` (``client_key: random``) or ``<category>/<reviewerID or asin>``,
    every split a :class:`TextDataset`. ``meta`` holds ``source``
    (path and counts), ``num_classes`` (5), ``max_tokens`` and the split sizes.
    Deterministic in ``seed``.
    """
    cfg = make_reviews_config(config, **overrides)
    data, counts, keys = read_reviews(cfg)
    if not len(data):
        raise DataError(f"{cfg.path}: no usable review (lines read: {counts['lines']}, "
                        f"without text: {counts['no_text']}, empty: {counts['empty']}, "
                        f"filtered out by regions: {counts['filtered']})")
    rng = np.random.default_rng(cfg.seed)
    # a text (as the model reads it) in training never reappears in validation or test
    groups = duplicate_groups([" ".join(t) for t in data.tokens])
    counts["duplicate_texts"] = repeated_texts(groups)
    if cfg.client_key == "random":
        clients = _random_clients(cfg, data, groups, rng)
    else:
        clients, counts["clients_too_small"] = _natural_clients(cfg, data, groups, keys, rng)
    names = sorted({c.region for c in clients})
    meta = {
        "source": {"path": cfg.path, **counts},
        "config": cfg.model_dump(),
        "num_classes": NUM_CLASSES,
        "max_tokens": cfg.max_tokens,
        "split_sizes": {s: sum(len(c.split(s)) for c in clients) for s in
                        ("train", "val", "test")},
    }
    return Federation(name="reviews", regions=names, clients=clients, meta=meta)


def _random_clients(cfg: ReviewsConfig, data: TextDataset, groups: np.ndarray,
                    rng: np.random.Generator) -> list[ClientData]:
    """``clients_per_region`` clients per category, Dirichlet(``alpha_d``) label skew,
    leak-free hold-outs."""
    k = cfg.clients_per_region
    category = np.asarray(data.category)
    region_members = {r: np.flatnonzero(category == r) for r in np.unique(category).tolist()}
    for region, members in region_members.items():
        if len(members) < k + 1:
            raise DataError(f"{cfg.path}: region (category) {region!r} has {len(members)} "
                            f"reviews, too few for {k} clients (at least {k + 1}: a training "
                            "review per client and a test review); lower clients_per_region "
                            "or drop it with regions")
    holdouts = leak_free_holdouts(rng, groups, data.category, k, cfg.val_fraction,
                                  cfg.test_fraction)
    clients = []
    for region, members in region_members.items():
        splits = region_client_splits(rng, data.label[members], k, cfg.alpha_d,
                                      cfg.val_fraction, cfg.test_fraction,
                                      holdouts=holdouts[members])
        for j, (train, val, test) in enumerate(splits):
            clients.append(ClientData(f"{region}/c{j:03d}", region,
                                      data.subset(members[train]), data.subset(members[val]),
                                      data.subset(members[test])))
    return clients


def _natural_clients(cfg: ReviewsConfig, data: TextDataset, groups: np.ndarray,
                     keys: list[str], rng: np.random.Generator
                     ) -> tuple[list[ClientData], int]:
    """One client per (category, reviewer or product) with two or more distinct texts —
    per category the ``clients_per_region`` with the most reviews (ties: by id) — and
    leak-free hold-outs within each client; also how many were dropped as too small."""
    owners: dict[tuple[str, str], list[int]] = {}
    for i, (category, key) in enumerate(zip(data.category, keys, strict=True)):
        owners.setdefault((category, key), []).append(i)
    usable = {o: m for o, m in owners.items() if len(set(groups[m].tolist())) >= 2}
    kept: list[tuple[str, str]] = []
    for region in sorted({c for c, _ in usable}):
        mine = sorted((o for o in usable if o[0] == region),
                      key=lambda o: (-len(usable[o]), o[1]))
        kept += sorted(mine[:cfg.clients_per_region], key=lambda o: o[1])
    if not kept:
        raise DataError(f"{cfg.path}: no {cfg.client_key} has two distinct review texts "
                        "(a training and a test one)")
    members = np.concatenate([np.array(usable[o]) for o in kept])
    owner = np.concatenate([np.full(len(usable[o]), j) for j, o in enumerate(kept)])
    holdouts = leak_free_holdouts(rng, groups[members], owner.astype(str).tolist(), 1,
                                  cfg.val_fraction, cfg.test_fraction)
    clients = []
    for j, (region, key) in enumerate(kept):
        mine, split = members[owner == j], holdouts[owner == j]
        clients.append(ClientData(f"{region}/{key}", region,
                                  *(data.subset(mine[split == s]) for s in (TRAIN, VAL, TEST))))
    return clients, len(owners) - len(usable)
