"""``esci-synth``: the embedded, generated multi-task retail query benchmark (paper App. B.1;
docs/models.md).

Construction, per client u with profile region r (whose conventions label u's data):

1. intent proportions p_u ~ Dirichlet(α_D · 1_8) (paper B.1.5);
2. per query: intent ~ p_u; category ~ P(c | r) of paper Eq. 8
   (``regional_bias / |C_r|`` for preferred categories, ``(1 - regional_bias) / |C \\ C_r|``
   otherwise); a template of that intent, uniformly; slots filled uniformly from the category's
   lexicon (shared lists for attributes and locations); with probability ``generic_rate`` one or
   two generic filler words (tag O, Zipf-distributed over the generic pool) inserted at random
   boundaries between template units (never inside a multi-word entity);
3. spell corruption (paper B.1.4): every token independently with probability
   ``corruption_rate``; one character substituted / deleted / inserted with probabilities
   ``corruption_mix``. The target is the clean word.

Concept shift (not in the paper; docs/models.md) makes P(y | x) region-dependent for a fraction
``concept_shift`` of the inventory in :mod:`regionfed.data.lexicon`: ambiguous words (entity type),
templates (intent), and regional spellings (spell target). Everything else is a function of the
source text: with ``concept_shift = 0`` identical source text always has identical labels.

Randomness: one ``numpy.random.default_rng(seed)``, spawned into independent streams (concept
shift, region assignment, client mixtures, client sizes, queries, corruption, splits), so e.g. the
corruption rate does not change which queries are drawn.

Splits (``split``): by default leak-free — queries with the same clean text (whatever their
typos) are held out together or not at all, across clients and regions
(:func:`~regionfed.data.partition.leak_free_holdouts`, each client's hold-out targets those of
the random split below; ``meta["source"]["duplicate_texts"]`` counts the repeats), so test
measures queries the federation never trained on; ``random`` splits each client's queries at
random (:func:`_split`).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from regionfed.data import lexicon as lx
from regionfed.data.federation import ClientData, Federation
from regionfed.data.partition import (
    TEST,
    TRAIN,
    VAL,
    assign_regions,
    client_sizes,
    dirichlet_proportions,
    duplicate_groups,
    holdout_counts,
    leak_free_holdouts,
    repeated_texts,
)
from regionfed.data.queries import INTENTS, QueryDataset
from regionfed.errors import config_error_from_validation

#: Spell-corruption operations, in the order of ``corruption_mix``.
CORRUPTION_OPS: tuple[str, ...] = ("substitution", "deletion", "insertion")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
#: Zipf exponent of the generic-word distribution (rank k has probability ∝ 1 / k^s).
GENERIC_ZIPF_EXPONENT = 1.0
_MIN_PER_CLIENT = 2  # one train and one test example


class EsciSynthConfig(BaseModel):
    """Parameters of the generator; defaults reproduce paper Table 4."""

    model_config = ConfigDict(extra="forbid")

    num_queries: int = Field(20000, gt=0)
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    num_regions: int = Field(8, ge=1)
    clients_per_region: int = Field(10, ge=1)
    categories_per_region: int | None = Field(None, ge=1, le=len(lx.CATEGORIES))
    regional_bias: float = Field(0.7, ge=0.0, le=1.0)
    alpha_d: float = Field(0.3, gt=0.0)
    corruption_rate: float = Field(0.15, ge=0.0, le=1.0)
    corruption_mix: tuple[float, float, float] = (0.6, 0.2, 0.2)
    vocab_size: int = 5000
    max_tokens: int = Field(20, ge=4, le=20)
    generic_rate: float = Field(0.3, ge=0.0, le=1.0)
    concept_shift: float = Field(0.5, ge=0.0, le=1.0)
    region_assignment: Literal["semantic", "geographic", "random", "adversarial"] = "semantic"
    geographic_fidelity: float = Field(0.6, ge=0.0, le=1.0)
    client_size_skew: float = Field(0.0, ge=0.0)
    #: ``leak_free``: a query's clean text (typos aside) is in one split only, across all
    #: clients; ``random``: each client's queries split at random (a text repeated within
    #: or across clients can be in training and in test: 16 % of test queries at the
    #: default size, as in the studies published before this setting existed)
    split: Literal["leak_free", "random"] = "leak_free"
    seed: int = Field(0, ge=0)

    @field_validator("corruption_mix")
    @classmethod
    def _mix_is_distribution(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(x < 0 or not np.isfinite(x) for x in v):
            raise ValueError("entries must be non-negative")
        if abs(sum(v) - 1.0) > 1e-6:
            raise ValueError(f"must sum to 1 (substitution, deletion, insertion), got {sum(v)}")
        return v

    @field_validator("vocab_size")
    @classmethod
    def _vocab_holds_domain(cls, v: int) -> int:
        need = len(lx.domain_words())
        if v < need:
            raise ValueError(f"must be at least the number of domain words ({need})")
        return v

    @model_validator(mode="after")
    def _enough_queries(self) -> EsciSynthConfig:
        clients = self.num_regions * self.clients_per_region
        if self.num_queries < _MIN_PER_CLIENT * clients:
            raise ValueError(
                f"num_queries ({self.num_queries}) is too few for {clients} clients "
                f"(num_regions x clients_per_region); need at least {_MIN_PER_CLIENT * clients}"
            )
        return self


# --------------------------------------------------------------------------------------------
# Regions and Eq. 8
# --------------------------------------------------------------------------------------------


def region_names(num_regions: int) -> list[str]:
    """Table 5 slugs for 8 regions, ``region_00``, ``region_01``, … otherwise."""
    if num_regions == len(lx.TABLE5_PREFERENCES):
        return list(lx.TABLE5_PREFERENCES)
    return [f"region_{r:02d}" for r in range(num_regions)]


def preferred_categories(num_regions: int, categories_per_region: int | None = None) -> list[
    list[str]
]:
    """Preferred categories C_r per region.

    ``categories_per_region=None`` with 8 regions: paper Table 5. Otherwise k categories per
    region (default ``max(2, 24 // num_regions)``) dealt cyclically: region r gets categories
    ``r·k … r·k + k - 1`` (mod 24) of :data:`regionfed.data.lexicon.CATEGORIES`.
    """
    if categories_per_region is None and num_regions == len(lx.TABLE5_PREFERENCES):
        return [list(c) for c in lx.TABLE5_PREFERENCES.values()]
    n = len(lx.CATEGORIES)
    k = categories_per_region or max(2, n // num_regions)
    return [[lx.CATEGORIES[(r * k + j) % n] for j in range(k)] for r in range(num_regions)]


def category_distribution(preferred: list[str], regional_bias: float) -> np.ndarray:
    """P(category | region), paper Eq. 8, over :data:`regionfed.data.lexicon.CATEGORIES`.

    Preferred categories share ``regional_bias`` uniformly, the others ``1 - regional_bias``.
    If every category is preferred, the distribution is uniform.
    """
    pref = np.array([c in preferred for c in lx.CATEGORIES])
    if pref.all():
        return np.full(len(pref), 1.0 / len(pref))
    p = np.where(pref, regional_bias / pref.sum(), (1.0 - regional_bias) / (~pref).sum())
    return p / p.sum()


# --------------------------------------------------------------------------------------------
# Spell corruption (paper B.1.4)
# --------------------------------------------------------------------------------------------


def corrupt_word(
    word: str, rng: np.random.Generator, mix: tuple[float, float, float] = (0.6, 0.2, 0.2)
) -> tuple[str, str]:
    """Corrupt one character of ``word``; returns ``(new_word, op)``.

    ``op`` is drawn from :data:`CORRUPTION_OPS` with probabilities ``mix``: substitution of a
    random position by a *different* letter, deletion of a random position, insertion of a random
    letter at a random position (0 … len). The result always differs from ``word``. A deletion
    drawn for a one-letter word becomes a substitution (lexicon words have ≥ 2 letters).
    """
    u = rng.random()
    op = "substitution" if u < mix[0] else "deletion" if u < mix[0] + mix[1] else "insertion"
    n = len(word)
    if op == "deletion" and n < 2:
        op = "substitution"
    if op == "substitution":
        i = int(rng.integers(n))
        letter = _LETTERS[(_LETTERS.index(word[i]) + 1 + int(rng.integers(25))) % 26] \
            if word[i] in _LETTERS else _LETTERS[int(rng.integers(26))]
        return word[:i] + letter + word[i + 1:], op
    if op == "deletion":
        i = int(rng.integers(n))
        return word[:i] + word[i + 1:], op
    i = int(rng.integers(n + 1))
    return word[:i] + _LETTERS[int(rng.integers(26))] + word[i:], op


# --------------------------------------------------------------------------------------------
# Concept shift
# --------------------------------------------------------------------------------------------


def _round(x: float) -> int:
    return int(np.floor(x + 0.5))


@dataclass(frozen=True)
class _ShiftPlan:
    """Which inventory items are region-dependent, and for which profiles (indices)."""

    words: frozenset[str]
    templates: dict[str, frozenset[int]]  # shifted template id → profiles using alt_intent
    spellings: frozenset[str]  # shifted American spellings
    british: frozenset[int]


def _plan_shift(rng: np.random.Generator, level: float, num_profiles: int) -> _ShiftPlan:
    """Choose ``round(level · size)`` items of each inventory kind.

    All random choices are drawn whatever ``level`` is and the shifted items are a prefix of a
    seeded order, so the shifted sets of a lower level are subsets of those of a higher level.
    """
    half = num_profiles // 2
    w_order = rng.permutation(len(lx.AMBIGUOUS_WORDS))
    t_order = rng.permutation(len(lx.SHIFTABLE_TEMPLATES))
    alt_sets = [frozenset(int(i) for i in rng.choice(num_profiles, half, replace=False))
                for _ in lx.SHIFTABLE_TEMPLATES]
    s_order = rng.permutation(len(lx.SPELLING_PAIRS))
    british = frozenset(int(i) for i in rng.choice(num_profiles, half, replace=False))

    def take(order: np.ndarray) -> list[int]:
        return sorted(int(i) for i in order[: _round(level * len(order))])

    return _ShiftPlan(
        words=frozenset(lx.AMBIGUOUS_WORDS[i].word for i in take(w_order)),
        templates={lx.SHIFTABLE_TEMPLATES[i].id: alt_sets[i] for i in take(t_order)},
        spellings=frozenset(lx.SPELLING_PAIRS[i][0] for i in take(s_order)),
        british=british,
    )


def _sense_for(word: lx.AmbiguousWord, shifted: bool, preferred: list[str]) -> str:
    return "alternative" if shifted and word.alternative.category in preferred else "default"


def _intent_for(template: lx.Template, plan: _ShiftPlan, profile: int) -> str:
    alt = plan.templates.get(template.id)
    if alt is not None and profile in alt and template.alt_intent:
        return template.alt_intent
    return template.intent


def _spelling_target(american: str, british: str, plan: _ShiftPlan, profile: int) -> str:
    return british if american in plan.spellings and profile in plan.british else american


# --------------------------------------------------------------------------------------------
# Profiles: one labelling convention per profile region
# --------------------------------------------------------------------------------------------

Entry = tuple[str, ...]


@dataclass
class _Profile:
    name: str
    preferred: list[str]
    cat_probs: np.ndarray
    cat_pools: dict[str, list[list[Entry]]]  # slot → per category index → entries
    shared_pools: dict[str, list[Entry]]
    templates_by_intent: list[list[lx.Template]]
    template_intent: dict[str, int]
    spelling: dict[str, tuple[str, str]]  # American word → (British form, target)

    def pool(self, slot: str, cat: int) -> list[Entry]:
        if slot in self.cat_pools:
            return self.cat_pools[slot][cat]
        return self.shared_pools[slot]


def _build_profile(
    index: int, name: str, preferred: list[str], cfg: EsciSynthConfig, plan: _ShiftPlan
) -> _Profile:
    cat_pools = {s: [[tuple(e.split()) for e in lx.entries(s, c)] for c in lx.CATEGORIES]
                 for s in lx.CATEGORY_SLOTS}
    shared = {s: [tuple(e.split()) for e in lx.entries(s)] for s in lx.SHARED_SLOTS}
    for word in lx.AMBIGUOUS_WORDS:
        sense_name = _sense_for(word, word.word in plan.words, preferred)
        sense = word.alternative if sense_name == "alternative" else word.default
        if sense.category is None:
            shared[sense.slot].append((word.word,))
        else:
            cat_pools[sense.slot][lx.CATEGORIES.index(sense.category)].append((word.word,))
    by_intent: list[list[lx.Template]] = [[] for _ in INTENTS]
    t_intent: dict[str, int] = {}
    for t in lx.TEMPLATES:
        k = INTENTS.index(_intent_for(t, plan, index))
        t_intent[t.id] = k
        if len(t.units) <= cfg.max_tokens:
            by_intent[k].append(t)
    spelling = {us: (gb, _spelling_target(us, gb, plan, index)) for us, gb in lx.SPELLING_PAIRS}
    return _Profile(name, preferred, category_distribution(preferred, cfg.regional_bias),
                    cat_pools, shared, by_intent, t_intent, spelling)


# --------------------------------------------------------------------------------------------
# Rendering one query
# --------------------------------------------------------------------------------------------


class _Uniforms:
    """Buffered U(0, 1) draws from one generator (fast scalar draws, deterministic)."""

    def __init__(self, rng: np.random.Generator, block: int = 16384) -> None:
        self._rng, self._block = rng, block
        self._buf: list[float] = []
        self._i = 0

    def next(self) -> float:
        if self._i >= len(self._buf):
            self._buf = self._rng.random(self._block).tolist()
            self._i = 0
        self._i += 1
        return self._buf[self._i - 1]

    def index(self, n: int) -> int:
        return min(int(self.next() * n), n - 1)


@dataclass
class _Generic:
    words: list[str]
    cdf: list[float]

    @classmethod
    def zipf(cls, words: list[str], exponent: float = GENERIC_ZIPF_EXPONENT) -> _Generic:
        if not words:
            return cls([], [])
        w = 1.0 / np.arange(1, len(words) + 1) ** exponent
        return cls(words, np.cumsum(w / w.sum()).tolist())

    def draw(self, uni: _Uniforms) -> str:
        i = bisect.bisect_right(self.cdf, uni.next())
        return self.words[min(i, len(self.words) - 1)]


Group = tuple[list[str], list[str], list[str]]  # source words, target words, tags


def _entry_group(entry: Entry, entity: str | None, prof: _Profile, uni: _Uniforms) -> Group:
    src, tgt = [], []
    for w in entry:
        if w in prof.spelling:
            british, target = prof.spelling[w]
            src.append(british if uni.next() < 0.5 else w)
            tgt.append(target)
        else:
            src.append(w)
            tgt.append(w)
    if entity is None:
        tags = ["O"] * len(entry)
    else:
        tags = [f"B-{entity}"] + [f"I-{entity}"] * (len(entry) - 1)
    return src, tgt, tags


def _pick(pool: list[Entry], uni: _Uniforms, short: bool, avoid: Entry | None) -> Entry:
    if short:
        pool = [e for e in pool if len(e) == 1]
    i = uni.index(len(pool))
    if avoid is not None and pool[i] == avoid and len(pool) > 1:
        i = (i + 1 + uni.index(len(pool) - 1)) % len(pool)
    return pool[i]


def _render(
    template: lx.Template,
    cat: int,
    prof: _Profile,
    uni: _Uniforms,
    generic: _Generic,
    n_generic: int,
    short: bool,
) -> Group:
    groups: list[Group] = []
    last: dict[str, Entry] = {}
    for kind, value in template.units:
        if kind == "lit":
            groups.append(_entry_group((value,), None, prof, uni))
            continue
        entry = _pick(prof.pool(value, cat), uni, short, last.get(value))
        last[value] = entry
        groups.append(_entry_group(entry, lx.SLOT_ENTITY[value], prof, uni))
    for _ in range(n_generic):
        word = generic.draw(uni)
        groups.insert(uni.index(len(groups) + 1), ([word], [word], ["O"]))
    src = [w for g in groups for w in g[0]]
    tgt = [w for g in groups for w in g[1]]
    tags = [t for g in groups for t in g[2]]
    return src, tgt, tags


def _make_query(
    template: lx.Template, cat: int, prof: _Profile, uni: _Uniforms, generic: _Generic,
    cfg: EsciSynthConfig,
) -> Group:
    """Render within ``max_tokens``: redraw fillers; later without generic words; finally with
    single-word fillers only (every template used has at most ``max_tokens`` units)."""
    n_generic = 0
    if generic.words and uni.next() < cfg.generic_rate:
        n_generic = 1 if uni.next() < 0.5 else 2
    for attempt in range(30):
        out = _render(template, cat, prof, uni, generic,
                      n_generic if attempt < 10 else 0, short=attempt >= 20)
        if len(out[0]) <= cfg.max_tokens:
            return out
    raise AssertionError("unreachable: single-word fillers always fit")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------------------------


def _client_queries(
    prof: _Profile, intent_p: np.ndarray, n: int, rng: np.random.Generator, uni: _Uniforms,
    generic: _Generic, cfg: EsciSynthConfig,
) -> dict[str, list[Any]]:
    intents = rng.choice(len(INTENTS), size=n, p=intent_p)
    cats = rng.choice(len(lx.CATEGORIES), size=n, p=prof.cat_probs)
    out: dict[str, list[Any]] = {k: [] for k in
                                 ("source", "targets", "ner", "intent", "category", "template")}
    for k, c in zip(intents.tolist(), cats.tolist(), strict=True):
        pool = prof.templates_by_intent[k]
        t = pool[uni.index(len(pool))]
        src, tgt, tags = _make_query(t, c, prof, uni, generic, cfg)
        out["source"].append(src)
        out["targets"].append(tgt)
        out["ner"].append(tags)
        out["intent"].append(k)
        out["category"].append(lx.CATEGORIES[c])
        out["template"].append(t.id)
    return out


def corrupt_query(
    source: list[list[str]], rng: np.random.Generator, cfg: EsciSynthConfig,
    counts: dict[str, int],
) -> list[list[str]]:
    """Noisy tokens: each token corrupted independently with probability ``corruption_rate``."""
    flat = [w for q in source for w in q]
    hit = (rng.random(len(flat)) < cfg.corruption_rate).tolist()
    noisy: list[list[str]] = []
    pos = 0
    for q in source:
        row = []
        for w in q:
            if hit[pos]:
                w, op = corrupt_word(w, rng, cfg.corruption_mix)
                counts[op] += 1
            row.append(w)
            pos += 1
        noisy.append(row)
    counts["tokens"] += len(flat)
    return noisy


def _split(
    data: QueryDataset, rng: np.random.Generator, cfg: EsciSynthConfig
) -> tuple[QueryDataset, QueryDataset, QueryDataset]:
    """Per-client split: ``round(n · test_fraction)`` test (≥ 1, leaving ≥ 1), then
    ``round(n_train · val_fraction)`` of the train part as validation (≥ 1 when the client has
    ≥ 10 examples and ``val_fraction > 0``, leaving ≥ 1 train example).

    Rounding is per client, so totals can differ from ``test_fraction`` by up to half an example
    per client (exact for the default: 250 per client → 180 / 20 / 50); clients with fewer than
    ``1 / test_fraction`` examples still get one test example, which raises the test share.
    """
    n = len(data)
    perm = rng.permutation(n)
    n_test = holdout_counts(n, cfg.test_fraction, keep=1, minimum=1)
    n_train = n - n_test
    want_val = 1 if cfg.val_fraction > 0 and n >= 10 else 0
    n_val = holdout_counts(n_train, cfg.val_fraction, keep=1, minimum=want_val)
    test, val, train = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
    return data.subset(train), data.subset(val), data.subset(test)


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def make_config(config: EsciSynthConfig | Mapping[str, Any] | None = None,
                **overrides: Any) -> EsciSynthConfig:
    """Validate a configuration (an :class:`EsciSynthConfig`, a mapping or keyword overrides);
    invalid values raise :class:`regionfed.errors.ConfigError` naming the field."""
    if isinstance(config, EsciSynthConfig):
        base: dict[str, Any] = config.model_dump()
    else:
        base = dict(config or {})
    try:
        return EsciSynthConfig.model_validate({**base, **overrides})
    except ValidationError as exc:
        raise config_error_from_validation(exc, "esci-synth config") from None


def generate_esci_synth(
    config: EsciSynthConfig | Mapping[str, Any] | None = None, **overrides: Any
) -> Federation:
    """Generate the ``esci-synth`` federation (paper App. B.1).

    Returns ``Federation(name="esci-synth")`` with ``num_regions`` regions of
    ``clients_per_region`` clients each; every split is a
    :class:`regionfed.data.queries.QueryDataset` whose ``region`` field is the client's profile.
    ``meta`` holds the config, the regions' preferred categories and P(category | region), each
    client's profile, per-client train intent histograms, the vocabulary, the realised
    concept-shift inventory and corruption counts. Fully determined by ``seed``.
    """
    cfg = make_config(config, **overrides)
    (rng_shift, rng_assign, rng_mix, rng_size, rng_query, rng_noise, rng_split) = \
        np.random.default_rng(cfg.seed).spawn(7)
    m, k = cfg.num_regions, cfg.clients_per_region
    names = region_names(m)
    prefs = preferred_categories(m, cfg.categories_per_region)
    plan = _plan_shift(rng_shift, cfg.concept_shift, m)
    profiles = [_build_profile(i, names[i], prefs[i], cfg, plan) for i in range(m)]

    client_profile = np.repeat(np.arange(m), k)
    assigned = assign_regions(rng_assign, client_profile, m, cfg.region_assignment,
                              cfg.geographic_fidelity)
    mixes = dirichlet_proportions(rng_mix, m * k, len(INTENTS), cfg.alpha_d)
    sizes = client_sizes(rng_size, cfg.num_queries, m * k, cfg.client_size_skew,
                         minimum=_MIN_PER_CLIENT)
    vocab, n_domain = _vocabulary(cfg.vocab_size)
    generic = _Generic.zipf(lx.generic_words(cfg.vocab_size - n_domain))
    counts = dict.fromkeys((*CORRUPTION_OPS, "tokens"), 0)
    uni = _Uniforms(rng_query)
    datasets = []
    for u in range(m * k):
        prof = profiles[client_profile[u]]
        q = _client_queries(prof, mixes[u], int(sizes[u]), rng_query, uni, generic, cfg)
        tokens = corrupt_query(q["source"], rng_noise, cfg, counts)
        datasets.append(QueryDataset(tokens=tokens, region=[prof.name] * len(tokens), **q))

    # one group per clean query text, across every client (leak-free splits, the count)
    groups = duplicate_groups([" ".join(t) for d in datasets for t in d.source])
    clients, client_profiles = _make_clients(datasets, groups, assigned, client_profile,
                                             names, rng_split, cfg)
    meta = {
        "config": cfg.model_dump(),
        "intents": list(INTENTS),
        "categories": list(lx.CATEGORIES),
        "preferred_categories": dict(zip(names, prefs, strict=True)),
        "category_probabilities": {p.name: p.cat_probs.tolist() for p in profiles},
        "region_assignment": cfg.region_assignment,
        "client_profiles": client_profiles,
        "intent_histograms": {c.client_id: np.bincount(c.train.intent, minlength=len(INTENTS))
                              .tolist() for c in clients},
        "vocabulary": vocab,
        "num_domain_words": n_domain,
        "templates": {t.id: {"pattern": t.pattern, "intent": t.intent,
                             "alt_intent": t.alt_intent} for t in lx.TEMPLATES},
        "concept_shift": _shift_meta(plan, profiles, cfg.concept_shift),
        "corruption_counts": counts,
        "split_sizes": {s: sum(len(c.split(s)) for c in clients) for s in ("train", "val", "test")},
        "source": {"generator": "esci-synth", "split": cfg.split,
                   "duplicate_texts": repeated_texts(groups)},
    }
    return Federation(name="esci-synth", regions=names, clients=clients, meta=meta)


def _make_clients(
    datasets: list[QueryDataset], groups: np.ndarray, assigned: np.ndarray,
    client_profile: np.ndarray, names: list[str], rng: np.random.Generator,
    cfg: EsciSynthConfig,
) -> tuple[list[ClientData], dict[str, str]]:
    """Group the per-client datasets by assigned region, split them (``cfg.split``), name
    the clients ``<region>/c<k>``; also return each client's profile region."""
    splits = (_leak_free_splits(datasets, groups, rng, cfg) if cfg.split == "leak_free"
              else [_split(d, rng, cfg) for d in datasets])
    clients, profiles = [], {}
    for r, region in enumerate(names):
        for j, u in enumerate(np.flatnonzero(assigned == r).tolist()):
            cid = f"{region}/c{j:03d}"
            clients.append(ClientData(cid, region, *splits[u]))
            profiles[cid] = names[client_profile[u]]
    return clients, profiles


def _leak_free_splits(
    datasets: list[QueryDataset], groups: np.ndarray, rng: np.random.Generator,
    cfg: EsciSynthConfig,
) -> list[tuple[QueryDataset, QueryDataset, QueryDataset]]:
    """Per client (train, val, test): every text group (``groups``, over the clients'
    queries in order) in one split across all clients, each client's hold-outs at most
    :func:`_split`'s sizes and at least one test query."""
    owner = np.repeat(np.arange(len(datasets)), [len(d) for d in datasets])
    split = leak_free_holdouts(rng, groups, owner, 1, cfg.val_fraction, cfg.test_fraction)
    out = []
    for u, data in enumerate(datasets):
        mine = split[owner == u]
        out.append(tuple(data.subset(np.flatnonzero(mine == s)) for s in (TRAIN, VAL, TEST)))
    return out


def _vocabulary(vocab_size: int) -> tuple[list[str], int]:
    """Domain words padded with generic words to exactly ``vocab_size`` (sorted), and the number
    of domain words. Includes both spellings of every pair, whatever the concept shift."""
    domain = lx.domain_words()
    return sorted(domain | set(lx.generic_words(vocab_size - len(domain)))), len(domain)


def _shift_meta(plan: _ShiftPlan, profiles: list[_Profile], level: float) -> dict[str, Any]:
    def sense(s: lx.Sense) -> dict[str, Any]:
        return {"entity": s.entity, "slot": s.slot, "category": s.category}

    words = {
        a.word: {
            "shifted": a.word in plan.words,
            "default": sense(a.default),
            "alternative": sense(a.alternative),
            "sense_by_profile": {p.name: _sense_for(a, a.word in plan.words, p.preferred)
                                 for p in profiles},
        }
        for a in lx.AMBIGUOUS_WORDS
    }
    templates = {
        t.id: {
            "pattern": t.pattern,
            "shifted": t.id in plan.templates,
            "default_intent": t.intent,
            "alternative_intent": t.alt_intent,
            "intent_by_profile": {p.name: INTENTS[p.template_intent[t.id]] for p in profiles},
        }
        for t in lx.SHIFTABLE_TEMPLATES
    }
    spellings = {
        us: {
            "british": gb,
            "shifted": us in plan.spellings,
            "target_by_profile": {p.name: p.spelling[us][1] for p in profiles},
        }
        for us, gb in lx.SPELLING_PAIRS
    }
    return {
        "level": level,
        "words": words,
        "templates": templates,
        "spellings": spellings,
        "british_profiles": [profiles[i].name for i in sorted(plan.british)],
    }
