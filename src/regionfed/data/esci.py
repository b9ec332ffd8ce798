"""Real Amazon Shopping Queries (ESCI; Reddy et al., 2022) as a query-understanding federation.

Input: the official *examples* table (``example_id, query, query_id, product_id,
product_locale, esci_label, small_version, large_version, split``) as ``.csv`` (read with the
standard library) or ``.parquet`` as published (needs ``pyarrow``: the ``data`` extra, which
``make`` installs), optionally
already joined with the product columns (``product_title, product_description,
product_bullet_point, product_brand, product_color``). With ``products_path`` the official
*products* table is joined on ``(product_id, product_locale)`` and its product columns replace
any in the examples file. Extra columns are ignored.

Required columns: ``query, product_id, product_locale, esci_label``; ``esci_label`` must be one
of ``E, S, C, I``. ``query_id`` is optional: where the column is missing (e.g. the
``esci_us_judgments_150q.csv`` judgments file) or a value is blank (some public samples blank
it), a query is identified by its normalised text (lowercased, whitespace collapsed).

One example per distinct query: its lowercased whitespace tokens, truncated to
:data:`~regionfed.data.queries.MAX_TOKENS` (queries without tokens are skipped).

**The labels are weak labels**, derived by fixed rules from the real fields (ESCI has no
intent, NER or spelling annotation). A token's *words* are its ``\\w+`` parts; stopwords
(:data:`STOPWORDS`) never match.

* spell: the real query is the clean target; the input is the query with esci-synth's
  corruption applied (each token with probability ``corruption_rate``, one character
  substituted / deleted / inserted; :func:`regionfed.data.esci_synth.corrupt_query`, seeded).
  Real queries keep their own typos in the target.
* NER (BIO, on the clean query), first matching rule per token: a word of the
  ``product_brand`` of any of the query's judged products → ``BRAND``; a word of their
  ``product_color`` → ``MODIFIER``; a non-numeric word of the ``product_title`` of the query's
  ``E`` (exact) products → ``PRODUCT``; else ``O``. Consecutive tokens of one type form one
  entity (``B-`` then ``I-``). Without product columns every tag is ``O``.
* intent (:func:`weak_intent`), first matching rule: ``in stock`` / available / disponible →
  ``availability_check``; deal / sale / discount / coupon / clearance / oferta / descuento →
  ``deal_hunting``; review / rating / rated / reseña / opiniones → ``review_reading``;
  price / cheap / affordable / budget / precio / barato, a token with ``$``, or
  under / below / than followed by a token with a digit → ``price_comparison``; any ``BRAND``
  tag → ``brand_lookup``; else ``product_search``. ``category_browse`` and ``specific_item``
  are never assigned.

Regions: ``region_by="product_locale"`` — the majority ``product_locale`` of the query's rows
(ties: alphabetically first); ``region_by="category_map"`` — a csv with a ``region`` column
and *either* a ``product_id`` column (a query's region is the majority region of its mapped
judged products) *or* a ``query_id`` column (the query's region directly). Queries the map
does not cover are dropped (counted in ``meta["source"]["unmapped_queries"]``).

Per region (:func:`regionfed.data.partition.region_client_splits`): queries are split into train
/ val / test — queries with the same text under different ids in the same split, across regions
too (:func:`~regionfed.data.partition.leak_free_holdouts`; counted in
``meta["source"]["duplicate_texts"]``) — then dealt to ``clients_per_region`` clients with
Dirichlet(``alpha_d``) skew over the weak intent labels. A region needs ``clients_per_region +
1`` queries (a training query per client and a test query). ``meta["vocabulary"]`` holds the
clean words of the *training* splits only (no test word leaks into the spell candidates).
"""

from __future__ import annotations

import csv
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from regionfed.data.esci_synth import CORRUPTION_OPS, EsciSynthConfig, corrupt_query
from regionfed.data.federation import ClientData, Federation
from regionfed.data.partition import (
    duplicate_groups,
    leak_free_holdouts,
    region_client_splits,
    repeated_texts,
)
from regionfed.data.queries import INTENTS, MAX_TOKENS, QueryDataset
from regionfed.errors import DataError, config_error_from_validation

ESCI_LABELS: tuple[str, ...] = ("E", "S", "C", "I")
REQUIRED_COLUMNS: tuple[str, ...] = ("query", "product_id", "product_locale", "esci_label")
PRODUCT_COLUMNS: tuple[str, ...] = ("product_title", "product_description",
                                    "product_bullet_point", "product_brand", "product_color")
#: function words that are never tagged (English and Spanish)
STOPWORDS: frozenset[str] = frozenset(
    "a an and the of for with without in on to by at from or is it its s vs "
    "de la el los las y para con sin en un una por del al".split())

# weak intent cues (see the module docstring); single words are matched against a token's words
AVAILABILITY_WORDS = frozenset({"available", "availability", "instock", "disponible",
                                "disponibilidad"})
DEAL_WORDS = frozenset({"deal", "deals", "sale", "sales", "discount", "discounts",
                        "discounted", "coupon", "coupons", "clearance", "oferta", "ofertas",
                        "descuento", "descuentos"})
REVIEW_WORDS = frozenset({"review", "reviews", "rating", "ratings", "rated", "reseña",
                          "reseñas", "opiniones"})
PRICE_WORDS = frozenset({"price", "prices", "pricing", "cheap", "cheaper", "cheapest",
                         "inexpensive", "affordable", "budget", "precio", "precios", "barato",
                         "barata", "baratos", "baratas"})
PRICE_BOUNDS = frozenset({"under", "below", "than"})

_WORD = re.compile(r"\w+")


class EsciConfig(BaseModel):
    """Where the ESCI data is and how it becomes a federation."""

    model_config = ConfigDict(extra="forbid")

    #: the examples table (.csv or .parquet), optionally joined with the product columns
    path: str = "../shared/data/esci/esci_examples_with_product_text.csv"
    #: the official products table, joined on (product_id, product_locale)
    products_path: str | None = None
    region_by: Literal["product_locale", "category_map"] = "product_locale"
    #: csv with columns ``product_id,region`` or ``query_id,region`` (for region_by
    #: category_map)
    category_map: str | None = None
    clients_per_region: int = Field(4, ge=1)
    alpha_d: float = Field(0.3, gt=0.0)
    corruption_rate: float = Field(0.15, ge=0.0, le=1.0)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    seed: int = Field(0, ge=0)
    #: keep a seeded uniform sample of this many queries; None = all
    max_queries: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _category_map_matches_region_by(self) -> EsciConfig:
        if self.region_by == "category_map" and not self.category_map:
            raise ValueError("region_by=category_map needs category_map (a csv with columns "
                             "product_id,region or query_id,region)")
        if self.region_by != "category_map" and self.category_map:
            raise ValueError("category_map is only used with region_by=category_map")
        return self


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


@dataclass
class Table:
    """A csv or parquet file: its column names and its rows as ``(where, row)`` pairs, where
    ``where`` names the file and the row (``row N`` counts data rows from 1; csv rows also
    give the line the record ends on)."""

    path: Path
    columns: list[str]

    def rows(self) -> Iterator[tuple[str, dict[str, str]]]:
        if self.path.suffix == ".parquet":
            yield from _parquet_rows(self.path)
        else:
            yield from _csv_rows(self.path)

    def require(self, needed: tuple[str, ...] | list[str], what: str) -> None:
        """DataError naming the file and every missing column of ``needed``."""
        missing = [c for c in needed if c not in self.columns]
        if missing:
            raise DataError(f"{self.path}: the {what} lacks column(s) {', '.join(missing)} "
                            f"(has: {', '.join(self.columns) or 'none'})")


def open_table(path: str | Path, what: str) -> Table:
    """Read the header of a ``.csv`` (utf-8) or ``.parquet`` file; DataError if it is
    missing, unreadable or empty, or if it is parquet and ``pyarrow`` is not installed."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{what} not found at {path}")
    if not path.is_file():
        raise DataError(f"{path} is not a file (expected the {what} as .csv or .parquet)")
    if path.suffix == ".parquet":
        pq = _pyarrow_parquet(path)
        try:
            columns = list(pq.read_schema(path).names)
        except Exception as exc:  # pyarrow raises its own error types
            raise DataError(f"{path} is not a readable parquet file ({exc})") from None
        return Table(path, columns)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path} is not a readable utf-8 csv file ({exc})") from None
    if not header:
        raise DataError(f"{path} is empty (expected a csv header line)")
    return Table(path, [h.strip() for h in header])


def _pyarrow_parquet(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading {path} needs pyarrow: pip install pyarrow (or convert the "
                        "file to .csv)") from None
    return pq


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    limit = csv.field_size_limit()
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # product descriptions can be long
    row = 0
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader)]
            for values in reader:
                row += 1
                where = f"{path}, row {row} (line {reader.line_num})"
                if not values:
                    continue
                if len(values) != len(header):
                    raise DataError(f"{where}: {len(values)} fields, the header has "
                                    f"{len(header)}")
                yield where, dict(zip(header, values, strict=True))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}, after row {row}: not valid utf-8 csv ({exc})") from None
    finally:
        csv.field_size_limit(limit)


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    pq = _pyarrow_parquet(path)
    row = 0
    for batch in pq.ParquetFile(path).iter_batches():
        for record in batch.to_pylist():
            row += 1
            yield f"{path}, row {row}", {k: "" if v is None else str(v)
                                         for k, v in record.items()}


# --------------------------------------------------------------------------------------------
# Weak labels
# --------------------------------------------------------------------------------------------


def words_of(text: str) -> list[str]:
    """The lowercased ``\\w+`` parts of ``text``."""
    return _WORD.findall(text.lower())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that are not :data:`STOPWORDS`."""
    return {w for w in words_of(text) if w not in STOPWORDS}


def weak_ner(tokens: list[str], brand: set[str], color: set[str], title: set[str]
             ) -> list[str]:
    """BIO tags of ``tokens`` (module docstring): a token whose content words meet ``brand``
    is BRAND, else ``color`` MODIFIER, else (non-numeric words) ``title`` PRODUCT, else O."""
    types: list[str | None] = []
    for token in tokens:
        parts = [w for w in words_of(token) if w not in STOPWORDS]
        if any(w in brand for w in parts):
            types.append("BRAND")
        elif any(w in color for w in parts):
            types.append("MODIFIER")
        elif any(w in title and not w.isdigit() for w in parts):
            types.append("PRODUCT")
        else:
            types.append(None)
    tags = []
    for i, kind in enumerate(types):
        if kind is None:
            tags.append("O")
        else:
            tags.append(("I-" if i and types[i - 1] == kind else "B-") + kind)
    return tags


def weak_intent(tokens: list[str], ner: list[str]) -> int:
    """The index into :data:`INTENTS` of the cue-word rule of the module docstring."""
    words = [words_of(t) for t in tokens]
    flat = {w for ws in words for w in ws}
    text = " ".join(tokens)
    in_stock = any("in" in words[i] and "stock" in words[i + 1] for i in range(len(words) - 1))
    if in_stock or flat & AVAILABILITY_WORDS:
        return INTENTS.index("availability_check")
    if flat & DEAL_WORDS:
        return INTENTS.index("deal_hunting")
    if flat & REVIEW_WORDS:
        return INTENTS.index("review_reading")
    bounded = any(set(words[i]) & PRICE_BOUNDS and any(ch.isdigit() for ch in tokens[i + 1])
                  for i in range(len(tokens) - 1))
    if flat & PRICE_WORDS or "$" in text or bounded:
        return INTENTS.index("price_comparison")
    if any(tag.endswith("-BRAND") for tag in ner):
        return INTENTS.index("brand_lookup")
    return INTENTS.index("product_search")


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


@dataclass
class _Query:
    key: str
    query_id: str
    text: str
    locales: Counter[str] = field(default_factory=Counter)
    brand: set[str] = field(default_factory=set)
    color: set[str] = field(default_factory=set)
    title: set[str] = field(default_factory=set)
    products: list[str] = field(default_factory=list)


def query_key(query_id: str, query: str) -> str:
    """A query's identity: its ``query_id``, or ``text:<normalised query>`` when blank."""
    query_id = query_id.strip()
    return query_id if query_id else "text:" + " ".join(query.lower().split())


def _read_products(path: str) -> dict[tuple[str, str], tuple[str, str, str]]:
    table = open_table(path, "ESCI products table")
    table.require(["product_id", "product_locale"], "products table")
    out = {}
    for _, row in table.rows():
        out[(row["product_id"].strip(), row["product_locale"].strip())] = (
            row.get("product_title", ""), row.get("product_brand", ""),
            row.get("product_color", ""))
    return out


def read_queries(config: EsciConfig) -> tuple[dict[str, _Query], int]:
    """Aggregate the examples table per query; also return the number of rows read."""
    table = open_table(config.path, "ESCI examples file")
    table.require(REQUIRED_COLUMNS, "examples file")
    products = _read_products(config.products_path) if config.products_path else None
    queries: dict[str, _Query] = {}
    rows = 0
    for where, row in table.rows():
        rows += 1
        label = row["esci_label"].strip()
        if label not in ESCI_LABELS:
            raise DataError(f"{where}: esci_label {row['esci_label']!r} is not one of "
                            f"{', '.join(ESCI_LABELS)}")
        for column in ("product_id", "product_locale"):
            if not row[column].strip():
                raise DataError(f"{where}: empty {column}")
        pid, locale = row["product_id"].strip(), row["product_locale"].strip()
        key = query_key(row.get("query_id", ""), row["query"])
        q = queries.get(key)
        if q is None:
            q = queries[key] = _Query(key, row.get("query_id", "").strip(), row["query"])
        q.locales[locale] += 1
        q.products.append(pid)
        if products is not None:
            title, brand, color = products.get((pid, locale), ("", "", ""))
        else:
            title, brand, color = (row.get(c, "") for c in
                                   ("product_title", "product_brand", "product_color"))
        q.brand |= content_words(brand)
        q.color |= content_words(color)
        if label == "E":
            q.title |= content_words(title)
    if not rows:
        raise DataError(f"{table.path} has a header but no rows")
    return queries, rows


def _majority(votes: Counter[str]) -> str:
    return min(votes, key=lambda v: (-votes[v], v))


def _category_regions(path: str, queries: dict[str, _Query]) -> dict[str, str]:
    """Query key → region from the category map (module docstring); unmapped queries absent."""
    table = open_table(path, "ESCI category map")
    table.require(["region"], "category map")
    keys = [c for c in ("product_id", "query_id") if c in table.columns]
    if len(keys) != 1:
        raise DataError(f"{path}: the category map needs exactly one of the columns "
                        "product_id, query_id (beside region)")
    column = keys[0]
    mapping: dict[str, str] = {}
    for where, row in table.rows():
        key, region = row[column].strip(), row["region"].strip()
        if not key or not region:
            raise DataError(f"{where}: empty {column} or region")
        if mapping.setdefault(key, region) != region:
            raise DataError(f"{where}: {column} {key!r} is mapped to both "
                            f"{mapping[key]!r} and {region!r}")
    out = {}
    for key, q in queries.items():
        if column == "query_id":
            if q.query_id in mapping:
                out[key] = mapping[q.query_id]
        else:
            votes = Counter(mapping[p] for p in q.products if p in mapping)
            if votes:
                out[key] = _majority(votes)
    return out


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def make_esci_config(config: EsciConfig | Mapping[str, Any] | None = None,
                     **overrides: Any) -> EsciConfig:
    """Validate a configuration (an :class:`EsciConfig`, a mapping or keyword overrides);
    invalid values raise :class:`regionfed.errors.ConfigError` naming the field."""
    base = config.model_dump() if isinstance(config, EsciConfig) else dict(config or {})
    try:
        return EsciConfig.model_validate({**base, **overrides})
    except ValidationError as exc:
        raise config_error_from_validation(exc, "esci config") from None


def load_esci(config: EsciConfig | Mapping[str, Any] | None = None,
              **overrides: Any) -> Federation:
    """The ESCI federation of ``config`` (see the module docstring).

    Returns ``Federation(name="esci")``: regions sorted by name, ``clients_per_region``
    clients each (``<region>/c<k>``), every split a :class:`QueryDataset` with weak labels.
    ``meta`` holds ``source`` (files, region rule, rows read, queries used / skipped /
    unmapped), the training vocabulary, the config, corruption counts and split sizes.
    Deterministic in ``seed``.
    """
    cfg = make_esci_config(config, **overrides)
    queries, rows = read_queries(cfg)
    empty = [k for k, q in queries.items() if not q.text.split()]
    for k in empty:
        del queries[k]
    if cfg.region_by == "category_map":
        assert cfg.category_map is not None  # the config validator guarantees it
        region_of = _category_regions(cfg.category_map, queries)
    else:
        region_of = {k: _majority(q.locales) for k, q in queries.items()}
    keys = sorted(region_of)
    if not keys:
        raise DataError(f"{cfg.category_map}: the category map covers none of the queries of "
                        f"{cfg.path}" if cfg.category_map else f"{cfg.path}: no query has text")
    rng_sample, rng_noise, rng_split = np.random.default_rng(cfg.seed).spawn(3)
    if cfg.max_queries is not None and cfg.max_queries < len(keys):
        keys = sorted(keys[i] for i in rng_sample.choice(len(keys), cfg.max_queries,
                                                         replace=False))

    source = [queries[k].text.lower().split()[:MAX_TOKENS] for k in keys]
    ner = [weak_ner(t, queries[k].brand, queries[k].color, queries[k].title)
           for t, k in zip(source, keys, strict=True)]
    intent = np.array([weak_intent(t, tags) for t, tags in zip(source, ner, strict=True)],
                      dtype=np.int64)
    counts = dict.fromkeys((*CORRUPTION_OPS, "tokens"), 0)
    noise = EsciSynthConfig.model_construct(corruption_rate=cfg.corruption_rate)
    tokens = corrupt_query(source, rng_noise, noise, counts)
    regions = [region_of[k] for k in keys]
    data = QueryDataset(tokens=tokens, targets=[list(s) for s in source], ner=ner,
                        intent=intent, source=source, region=regions)

    names = sorted(set(regions))
    k = cfg.clients_per_region
    region_members = {r: np.array([i for i, q in enumerate(regions) if q == r]) for r in names}
    for region, members in region_members.items():
        if len(members) < k + 1:
            raise DataError(f"{cfg.path}: region {region!r} has {len(members)} queries, too few "
                            f"for {k} clients (each needs a training query and the region a "
                            f"test query: at least {k + 1}); lower clients_per_region")
    # queries with the same text (under different ids) are held out together, across regions
    groups = duplicate_groups([" ".join(t) for t in source])
    holdouts = leak_free_holdouts(rng_split, groups, regions, k, cfg.val_fraction,
                                  cfg.test_fraction)
    clients = []
    for region, members in region_members.items():
        splits = region_client_splits(rng_split, intent[members], k, cfg.alpha_d,
                                      cfg.val_fraction, cfg.test_fraction,
                                      holdouts=holdouts[members])
        for j, (train, val, test) in enumerate(splits):
            clients.append(ClientData(f"{region}/c{j:03d}", region,
                                      data.subset(members[train]), data.subset(members[val]),
                                      data.subset(members[test])))
    vocabulary = sorted({w for c in clients for t in c.train.targets for w in t})
    meta = {
        "source": {"path": cfg.path, "products_path": cfg.products_path,
                   "category_map": cfg.category_map, "region_by": cfg.region_by,
                   "rows": rows, "queries": len(keys), "skipped_empty_queries": len(empty),
                   "unmapped_queries": len(queries) - len(region_of),
                   "query_ids_from_text": sum(key.startswith("text:") for key in keys),
                   "duplicate_texts": repeated_texts(groups)},
        "labels": "weak (rules of regionfed.data.esci)",
        "config": cfg.model_dump(),
        "intents": list(INTENTS),
        "vocabulary": vocabulary,
        "corruption_counts": counts,
        "split_sizes": {s: sum(len(c.split(s)) for c in clients) for s in
                        ("train", "val", "test")},
    }
    return Federation(name="esci", regions=names, clients=clients, meta=meta)
