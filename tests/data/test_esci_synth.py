"""Statistical tests of the esci-synth generator (paper App. B.1, SPEC §6.1)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest

from regionfed.data import lexicon as lx
from regionfed.data.esci_synth import (
    CORRUPTION_OPS,
    EsciSynthConfig,
    corrupt_word,
    generate_esci_synth,
    preferred_categories,
)
from regionfed.data.federation import Federation, concat_splits
from regionfed.data.queries import INTENTS, NER_TAGS, QueryDataset
from regionfed.errors import ConfigError

SPLITS = ("train", "val", "test")


def pooled(fed: Federation) -> QueryDataset:
    return concat_splits([c.split(s) for c in fed.clients for s in SPLITS])


@pytest.fixture(scope="module")
def default_fed() -> Federation:
    return generate_esci_synth()


@pytest.fixture(scope="module")
def default_data(default_fed: Federation) -> QueryDataset:
    return pooled(default_fed)


def labels_by_text(data: QueryDataset, by_profile: bool) -> dict[tuple, set]:
    out: dict[tuple, set] = defaultdict(set)
    for i in range(len(data)):
        key = (" ".join(data.source[i]), data.region[i] if by_profile else "")
        out[key].add((int(data.intent[i]), tuple(data.ner[i]), tuple(data.targets[i])))
    return out


# ------------------------------------------------------------------------------ lexicon


def test_lexicon_invariants_hold() -> None:
    assert lx.lexicon_problems() == []
    assert len(lx.CATEGORIES) == 24
    assert len(lx.AMBIGUOUS_WORDS) >= 8
    assert len(lx.SHIFTABLE_TEMPLATES) >= 6
    assert len(lx.SPELLING_PAIRS) >= 6
    for intent in INTENTS:
        assert sum(t.intent == intent for t in lx.TEMPLATES) >= 4


def test_lexicon_check_detects_a_word_with_two_types(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = dict(lx.CATEGORY_LEXICONS)
    toys = bad["toys"]
    bad["toys"] = dataclasses.replace(toys, brands=toys.brands + ("laptop",))
    monkeypatch.setattr(lx, "CATEGORY_LEXICONS", bad)
    assert any("laptop" in p for p in lx.lexicon_problems())


def test_generic_words_are_deterministic_prefixes_and_disjoint() -> None:
    a, b = lx.generic_words(100), lx.generic_words(4000)
    assert a == b[:100]
    assert len(set(b)) == len(b)
    assert not set(b) & lx.domain_words()
    assert all(w.isalpha() and w.islower() and w.isascii() and len(w) >= 2 for w in b)


# ------------------------------------------------------------------------------ sizes


def test_default_sizes_and_structure(default_fed: Federation, default_data: QueryDataset) -> None:
    fed = default_fed
    assert fed.name == "esci-synth"
    assert fed.regions == list(lx.TABLE5_PREFERENCES)
    assert len(fed.clients) == 80
    assert all(len(fed.clients_in(r)) == 10 for r in fed.regions)
    assert fed.num_examples("train") + fed.num_examples("val") == 16000
    assert fed.num_examples("test") == 4000
    assert fed.num_examples("val") == 1600  # 10 % of each client's training part
    assert all(len(c.val) >= 1 and len(c.test) >= 1 and len(c.train) >= 1 for c in fed.clients)
    assert max(len(t) for t in default_data.tokens) <= 20
    assert set(np.unique(default_data.intent)) == set(range(len(INTENTS)))
    assert {t for seq in default_data.ner for t in seq} == set(NER_TAGS)
    vocab = fed.meta["vocabulary"]
    assert 4500 <= len(vocab) <= 5500 and vocab == sorted(set(vocab))
    assert fed.meta["num_domain_words"] == len(lx.domain_words())
    emitted = {w for seq in default_data.targets for w in seq}
    assert emitted <= set(vocab)
    assert fed.meta["config"] == EsciSynthConfig().model_dump()
    assert set(fed.meta["intent_histograms"]) == {c.client_id for c in fed.clients}
    for c in fed.clients:
        hist = fed.meta["intent_histograms"][c.client_id]
        assert hist == np.bincount(c.train.intent, minlength=8).tolist()


def test_splits_are_disjoint_per_client(default_fed: Federation) -> None:
    c = default_fed.clients[0]
    assert (len(c.train), len(c.val), len(c.test)) == (180, 20, 50)
    assert c.client_id == f"{c.region}/c000"


def clean_texts(fed: Federation, split: str) -> set[str]:
    return {" ".join(t) for c in fed.clients for t in c.split(split).source}


def test_default_split_never_holds_out_a_training_query(default_fed: Federation) -> None:
    # the same clean query (whatever its typos) is in one split across all clients
    texts = {s: clean_texts(default_fed, s) for s in SPLITS}
    assert not texts["train"] & texts["test"]
    assert not texts["train"] & texts["val"] and not texts["val"] & texts["test"]
    source = default_fed.meta["source"]
    assert source["split"] == "leak_free" and source["duplicate_texts"] > 1000


def test_random_split_is_per_client_and_can_test_on_training_queries() -> None:
    fed = generate_esci_synth(num_queries=4000, split="random")
    assert {(len(c.train), len(c.val), len(c.test)) for c in fed.clients} == {(36, 4, 10)}
    assert clean_texts(fed, "train") & clean_texts(fed, "test")
    assert fed.meta["source"]["split"] == "random"


@pytest.mark.parametrize("m", [4, 16])
def test_other_region_counts(m: int) -> None:
    fed = generate_esci_synth(num_regions=m, clients_per_region=3, num_queries=4000,
                              concept_shift=1.0)
    assert fed.regions == [f"region_{r:02d}" for r in range(m)]
    assert len(fed.clients) == 3 * m
    prefs = fed.meta["preferred_categories"]
    k = max(2, 24 // m)
    assert all(len(v) == k for v in prefs.values())
    assert prefs == dict(zip(fed.regions, preferred_categories(m), strict=True))
    data = pooled(fed)
    share = np.mean([cat in prefs[r] for cat, r in zip(data.category, data.region, strict=True)])
    assert abs(share - 0.7) < 0.03


def test_max_tokens_and_generic_rate() -> None:
    fed = generate_esci_synth(num_queries=2000, max_tokens=4, generic_rate=1.0)
    data = pooled(fed)
    assert max(len(t) for t in data.tokens) <= 4
    none = pooled(generate_esci_synth(num_queries=2000, generic_rate=0.0))
    domain = lx.domain_words()
    assert all(w in domain for seq in none.targets for w in seq)
    every = pooled(generate_esci_synth(num_queries=2000, generic_rate=1.0))
    assert all(any(w not in domain for w in seq) for seq in every.targets)


def test_val_fraction_zero_and_size_skew() -> None:
    fed = generate_esci_synth(num_queries=4000, val_fraction=0.0, client_size_skew=1.0)
    assert fed.num_examples("val") == 0
    sizes = np.array([len(c.train) + len(c.test) for c in fed.clients])
    assert sizes.sum() == 4000 and sizes.min() >= 2
    assert sizes.std() / sizes.mean() > 0.5  # lognormal(σ=1) sizes are clearly unequal
    equal = generate_esci_synth(num_queries=4000)
    eq_sizes = [len(c.train) + len(c.val) + len(c.test) for c in equal.clients]
    assert set(eq_sizes) == {50}


# ------------------------------------------------------------------------------ Eq. 8 bias


def preferred_share(fed: Federation) -> dict[str, float]:
    data = pooled(fed)
    prefs = fed.meta["preferred_categories"]
    out = {}
    for r in fed.regions:
        mask = [reg == r for reg in data.region]
        cats = [c for c, keep in zip(data.category, mask, strict=True) if keep]
        out[r] = float(np.mean([c in prefs[r] for c in cats]))
    return out


def test_regional_bias_default(default_fed: Federation) -> None:
    shares = preferred_share(default_fed)
    assert all(abs(s - 0.7) <= 0.03 for s in shares.values()), shares
    probs = default_fed.meta["category_probabilities"]["urban_tech"]
    assert probs[lx.CATEGORIES.index("gaming")] == pytest.approx(0.35)
    assert probs[lx.CATEGORIES.index("books")] == pytest.approx(0.3 / 22)


def test_regional_bias_non_default() -> None:
    shares = preferred_share(generate_esci_synth(regional_bias=0.5))
    assert all(abs(s - 0.5) <= 0.03 for s in shares.values()), shares


# ------------------------------------------------------------------------------ corruption


def test_dataset_corruption_rate_and_mix(default_data: QueryDataset) -> None:
    pairs = [(t, s) for ts, ss in zip(default_data.tokens, default_data.source, strict=True)
             for t, s in zip(ts, ss, strict=True)]
    changed = [(t, s) for t, s in pairs if t != s]
    assert abs(len(changed) / len(pairs) - 0.15) <= 0.01
    d = np.array([len(t) - len(s) for t, s in changed])
    assert set(np.unique(d)) <= {-1, 0, 1}
    assert abs(np.mean(d == 0) - 0.6) <= 0.03
    assert abs(np.mean(d == -1) - 0.2) <= 0.03
    assert abs(np.mean(d == 1) - 0.2) <= 0.03


@pytest.mark.parametrize("mix", [(0.6, 0.2, 0.2), (0.1, 0.3, 0.6)])
def test_corrupt_word_mix(mix: tuple[float, float, float]) -> None:
    rng = np.random.default_rng(1)
    words = ["laptop", "it", "sneakers", "xl", "organizer"]
    ops = []
    for i in range(20000):
        w = words[i % len(words)]
        new, op = corrupt_word(w, rng, mix)
        assert new != w and new.isalpha() and new.islower()
        assert len(new) - len(w) == {"substitution": 0, "deletion": -1, "insertion": 1}[op]
        ops.append(op)
    for op, p in zip(CORRUPTION_OPS, mix, strict=True):
        assert abs(ops.count(op) / len(ops) - p) <= 0.03


def test_corruption_rate_is_a_parameter() -> None:
    data = pooled(generate_esci_synth(num_queries=4000, corruption_rate=0.0))
    assert data.tokens == data.source
    data = pooled(generate_esci_synth(num_queries=4000, corruption_rate=0.4))
    flat = [(t, s) for ts, ss in zip(data.tokens, data.source, strict=True)
            for t, s in zip(ts, ss, strict=True)]
    assert abs(np.mean([t != s for t, s in flat]) - 0.4) <= 0.02


# ------------------------------------------------------------------------------ label skew


def mean_max_share(fed: Federation) -> float:
    hists = np.array(list(fed.meta["intent_histograms"].values()), dtype=float)
    return float((hists.max(axis=1) / hists.sum(axis=1)).mean())


def test_lower_alpha_gives_more_skewed_clients() -> None:
    low = mean_max_share(generate_esci_synth(alpha_d=0.1))
    high = mean_max_share(generate_esci_synth(alpha_d=2.0))
    assert low > 0.6 and high < 0.45 and low - high > 0.25, (low, high)


# ------------------------------------------------------------------------------ concept shift


def test_no_shift_means_no_ambiguity() -> None:
    fed = generate_esci_synth(concept_shift=0.0)
    data = pooled(fed)
    assert all(len(v) == 1 for v in labels_by_text(data, by_profile=False).values())
    british = {gb for _, gb in lx.SPELLING_PAIRS}
    assert not british & {w for seq in data.targets for w in seq}
    assert british & {w for seq in data.source for w in seq}  # users still type them
    cs = fed.meta["concept_shift"]
    assert not any(v["shifted"] for kind in ("words", "templates", "spellings")
                   for v in cs[kind].values())


@pytest.mark.parametrize("level", [0.5, 1.0])
def test_shift_makes_labels_region_dependent(level: float) -> None:
    fed = generate_esci_synth(concept_shift=level)
    data = pooled(fed)
    across = [k for k, v in labels_by_text(data, by_profile=False).items() if len(v) > 1]
    within = [k for k, v in labels_by_text(data, by_profile=True).items() if len(v) > 1]
    assert len(across) >= 20
    assert within == []
    cs = fed.meta["concept_shift"]
    shifted_words = {w for w, v in cs["words"].items() if v["shifted"]}
    shifted_spell = {w for us, v in cs["spellings"].items() if v["shifted"]
                     for w in (us, v["british"])}
    shifted_templates = {t for t, v in cs["templates"].items() if v["shifted"]}
    n = {kind: round(level * len(cs[kind])) for kind in ("words", "templates", "spellings")}
    assert (len(shifted_words), len(shifted_templates), len(shifted_spell) // 2) == (
        n["words"], n["templates"], n["spellings"])
    text_templates: dict[str, set[str]] = defaultdict(set)
    for src, tid in zip(data.source, data.template, strict=True):
        text_templates[" ".join(src)].add(tid)
    for text, _ in across:  # every conflict is explained by the realised inventory
        words = set(text.split())
        assert words & (shifted_words | shifted_spell) or text_templates[text] & shifted_templates


def test_shift_levels_are_nested_and_profiles_recorded() -> None:
    half = generate_esci_synth(num_queries=2000, concept_shift=0.5).meta["concept_shift"]
    full = generate_esci_synth(num_queries=2000, concept_shift=1.0).meta["concept_shift"]
    for kind in ("words", "templates", "spellings"):
        assert all(v["shifted"] for v in full[kind].values())
        assert {k for k, v in half[kind].items() if v["shifted"]} <= set(full[kind])
    apple = full["words"]["apple"]["sense_by_profile"]
    assert apple["price_conscious"] == "alternative" and apple["urban_tech"] == "default"
    deals = full["templates"]["deal_hunting/0"]["intent_by_profile"]
    assert set(deals.values()) == {"deal_hunting", "price_comparison"}
    assert len(full["british_profiles"]) == 4
    tyre = full["spellings"]["tire"]["target_by_profile"]
    assert {tyre[p] for p in full["british_profiles"]} == {"tyre"}


def test_shifted_word_tags_follow_profile() -> None:
    fed = generate_esci_synth(concept_shift=1.0)
    data = pooled(fed)
    tags = defaultdict(set)
    for src, ner, reg in zip(data.source, data.ner, data.region, strict=True):
        for w, t in zip(src, ner, strict=True):
            if w == "apple":
                tags[reg].add(t)
    assert tags["price_conscious"] == {"B-PRODUCT"}
    assert all(v == {"B-BRAND"} for r, v in tags.items() if r != "price_conscious")


# ------------------------------------------------------------------------------ determinism


def test_same_seed_same_data_different_seed_different() -> None:
    a = generate_esci_synth(num_queries=3000, seed=7)
    b = generate_esci_synth(num_queries=3000, seed=7)
    c = generate_esci_synth(num_queries=3000, seed=8)
    assert [x.client_id for x in a.clients] == [x.client_id for x in b.clients]
    for x, y in zip(a.clients, b.clients, strict=True):
        for s in SPLITS:
            dx, dy = x.split(s), y.split(s)
            for f in ("tokens", "targets", "ner", "source", "category", "template", "region"):
                assert getattr(dx, f) == getattr(dy, f)
            assert np.array_equal(dx.intent, dy.intent)
    assert a.meta == b.meta
    assert pooled(a).tokens != pooled(c).tokens
    assert a.meta["intent_histograms"] != c.meta["intent_histograms"]


# ------------------------------------------------------------------------------ assignment


def profiles_by_region(fed: Federation) -> dict[str, list[str]]:
    prof = fed.meta["client_profiles"]
    return {r: [prof[c.client_id] for c in fed.clients_in(r)] for r in fed.regions}


def test_semantic_assignment(default_fed: Federation) -> None:
    for r, profs in profiles_by_region(default_fed).items():
        assert set(profs) == {r}
    for c in default_fed.clients:
        assert set(c.train.region) == {default_fed.meta["client_profiles"][c.client_id]}


@pytest.mark.parametrize("k", [3, 10, 12])
def test_adversarial_assignment(k: int) -> None:
    fed = generate_esci_synth(num_queries=4000, clients_per_region=k,
                              region_assignment="adversarial")
    for profs in profiles_by_region(fed).values():
        assert len(profs) == k
        assert len(set(profs)) >= min(k, 8)


def test_random_assignment() -> None:
    fed = generate_esci_synth(region_assignment="random")
    by_region = profiles_by_region(fed)
    assert all(len(v) == 10 for v in by_region.values())
    stay = np.mean([p == r for r, v in by_region.items() for p in v])
    assert stay < 0.4  # about 1/8 expected
    for c in fed.clients:  # labels follow the profile, not the assigned region
        assert set(c.train.region) == {fed.meta["client_profiles"][c.client_id]}


def test_geographic_assignment() -> None:
    fed = generate_esci_synth(num_queries=8000, clients_per_region=50,
                              region_assignment="geographic", geographic_fidelity=0.6)
    by_region = profiles_by_region(fed)
    assert all(len(v) == 50 for v in by_region.values())
    stay = np.mean([p == r for r, v in by_region.items() for p in v])
    assert 0.55 < stay < 0.78  # 0.6 kept + movers that land back home
    assert not all(len(set(v)) == 1 for v in by_region.values())


# ------------------------------------------------------------------------------ config errors


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_queries": -5}, "num_queries"),
        ({"alpha_d": 0.0}, "alpha_d"),
        ({"alpha_d": -1.0}, "alpha_d"),
        ({"bogus": 1}, "bogus"),
        ({"corruption_mix": (0.5, 0.2, 0.2)}, "corruption_mix"),
        ({"corruption_mix": (1.2, -0.1, -0.1)}, "corruption_mix"),
        ({"concept_shift": 1.5}, "concept_shift"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"val_fraction": -0.1}, "val_fraction"),
        ({"max_tokens": 30}, "max_tokens"),
        ({"vocab_size": 100}, "vocab_size"),
        ({"region_assignment": "north"}, "region_assignment"),
        ({"num_queries": 100}, "num_queries"),
        ({"clients_per_region": 0}, "clients_per_region"),
    ],
)
def test_bad_config_raises_config_error(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        generate_esci_synth(**overrides)
    msg = str(info.value)
    assert field in msg and "\n" not in msg and msg.startswith("invalid esci-synth config")


def test_config_object_and_overrides_merge() -> None:
    cfg = EsciSynthConfig(num_queries=1600, seed=3)
    fed = generate_esci_synth(cfg, clients_per_region=2)
    assert len(fed.clients) == 16
    assert fed.meta["config"]["seed"] == 3 and fed.meta["config"]["num_queries"] == 1600
