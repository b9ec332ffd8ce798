"""The real-ESCI loader: fixture files in the official layout, weak labels, regions, errors,
and a schema test on the shared real data."""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import shared_data

from regionfed.data.esci import (
    EsciConfig,
    load_esci,
    open_table,
    read_queries,
    weak_intent,
    weak_ner,
)
from regionfed.data.federation import Federation
from regionfed.data.queries import INTENTS, QueryDataset
from regionfed.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "esci"
JOINED = FIXTURES / "examples_with_product_text.csv"
SHARED = shared_data("esci", "esci_examples_with_product_text.csv")
JUDGMENTS = shared_data("esci", "esci_us_judgments_150q.csv")
OFFICIAL = ("example_id", "query", "query_id", "product_id", "product_locale", "esci_label",
            "small_version", "large_version", "split")
PRODUCT = ("product_title", "product_description", "product_bullet_point", "product_brand",
           "product_color")


def everything(fed: Federation) -> QueryDataset:
    return QueryDataset.concat([c.split(s) for c in fed.clients for s in ("train", "val", "test")])


def by_target(fed: Federation) -> dict[str, tuple[list[str], list[str], str, list[str]]]:
    """clean query → (noisy tokens, NER tags, intent name, source) over every split."""
    d = everything(fed)
    return {" ".join(t): (tok, ner, INTENTS[i], src) for t, tok, ner, i, src in
            zip(d.targets, d.tokens, d.ner, d.intent, d.source, strict=True)}


def rewrite(tmp_path: Path, rows: list[dict[str, str]], columns: list[str]) -> Path:
    path = tmp_path / "examples.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def fixture_rows() -> tuple[list[dict[str, str]], list[str]]:
    with JOINED.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader), list(reader.fieldnames or [])


# ------------------------------------------------------------------------------ fixture


def test_fixture_becomes_locale_regions_of_clients_with_nonempty_splits():
    fed = load_esci(path=str(JOINED))
    assert fed.name == "esci" and fed.regions == ["es", "us"]
    assert [c.client_id for c in fed.clients] == [f"{r}/c{j:03d}" for r in ("es", "us")
                                                  for j in range(4)]
    assert all(len(c.train) >= 1 for c in fed.clients)
    for region in fed.regions:
        assert all(n > 0 for n in (fed.region_sizes("train")[region],
                                   fed.region_sizes("test")[region]))
        assert set(everything(Federation("x", [region], fed.clients_in(region))).region) == {
            region}
    data = everything(fed)
    assert len(data) == 19 and len({" ".join(t) for t in data.targets}) == 19  # one per query
    assert Counter(data.region) == {"us": 13, "es": 6}
    assert fed.meta["source"]["rows"] == 25 and fed.meta["source"]["queries"] == 19
    # the spell vocabulary holds the clean words of the training splits only
    train_words = {w for c in fed.clients for t in c.train.targets for w in t}
    assert fed.meta["vocabulary"] == sorted(train_words)
    test_only = {w for c in fed.clients for t in c.test.targets for w in t} - train_words
    assert test_only and not test_only & set(fed.meta["vocabulary"])


def test_weak_labels_of_a_hand_checked_query():
    # rows: Nike / Red / "Nike Men's Air Zoom Running Shoes" (E), Adidas / Black (S)
    clean = load_esci(path=str(JOINED), corruption_rate=0.0)
    tokens, ner, intent, source = by_target(clean)["cheap nike red running shoes"]
    assert tokens == source == ["cheap", "nike", "red", "running", "shoes"]
    assert ner == ["O", "B-BRAND", "B-MODIFIER", "B-PRODUCT", "I-PRODUCT"]
    assert intent == "price_comparison"  # "cheap"
    # spell: every token corrupted, the real query stays the target, tags stay aligned
    noisy = load_esci(path=str(JOINED), corruption_rate=1.0)
    for target, (tok, tags, _, src) in by_target(noisy).items():
        assert src == target.split() and len(tok) == len(src) == len(tags)
        assert all(a != b for a, b in zip(tok, src, strict=True))
    assert sum(noisy.meta["corruption_counts"][op] for op in
               ("substitution", "deletion", "insertion")) == noisy.meta["corruption_counts"][
                   "tokens"]


@pytest.mark.parametrize("query, intent", [
    ("coffee maker reviews", "review_reading"),
    ("laptop stand deal", "deal_hunting"),
    ("is the ps5 in stock", "availability_check"),
    ("usb c charger under 20", "price_comparison"),
    ("lego star wars", "brand_lookup"),  # brand LEGO
    ("blue yoga mat", "product_search"),
    ("funda iphone barata", "price_comparison"),
    ("auriculares bluetooth oferta", "deal_hunting"),
    ("zapatillas nike rojas", "brand_lookup"),
])
def test_intent_rule_on_the_fixture(query, intent):
    assert by_target(load_esci(path=str(JOINED)))[query][2] == intent


def test_rules_directly():
    brand, color, title = {"under", "armour"}, {"navy"}, {"shirt", "2", "organizer"}
    tags = weak_ner(["under", "armour", "navy", "shirt", "2", "for", "men"], brand, color, title)
    assert tags == ["B-BRAND", "I-BRAND", "B-MODIFIER", "B-PRODUCT", "O", "O", "O"]
    assert INTENTS[weak_intent(["under", "armour", "shirt"], tags[:2] + ["B-PRODUCT"])] == \
        "brand_lookup"  # "under" is a price cue only before a number
    assert INTENTS[weak_intent(["under", "sink", "organizer"], ["O"] * 3)] == "product_search"
    assert INTENTS[weak_intent(["shoes", "$30"], ["O"] * 2)] == "price_comparison"
    assert INTENTS[weak_intent(["socks", "in", "stockings"], ["O"] * 3)] == "product_search"
    assert INTENTS[weak_intent(["tv", "on", "sale", "in", "stock"], ["O"] * 5)] == \
        "availability_check"  # first rule wins
    assert weak_ner(["the", "north", "face"], {"the", "north", "face"}, set(), set()) == [
        "O", "B-BRAND", "I-BRAND"]  # stopwords never match


def test_blank_query_ids_fall_back_to_the_query_text():
    fed = load_esci(path=str(JOINED))
    assert "desk lamp" in by_target(fed)  # query_id blank, text "Desk  Lamp"
    assert fed.meta["source"]["query_ids_from_text"] == 1


def test_loading_is_deterministic_in_the_seed():
    def snapshot(fed: Federation) -> list:
        return [(c.client_id, s, c.split(s).tokens, c.split(s).targets) for c in fed.clients
                for s in ("train", "val", "test")]

    assert snapshot(load_esci(path=str(JOINED), seed=3)) == \
        snapshot(load_esci(EsciConfig(path=str(JOINED), seed=3)))
    assert snapshot(load_esci(path=str(JOINED), seed=3)) != \
        snapshot(load_esci(path=str(JOINED), seed=4))


def test_products_table_is_joined_on_id_and_locale():
    joined = by_target(load_esci(path=str(JOINED)))
    separate = by_target(load_esci(path=str(FIXTURES / "examples.csv"),
                                   products_path=str(FIXTURES / "products.csv")))
    assert separate == joined
    bare = by_target(load_esci(path=str(FIXTURES / "examples.csv")))  # no product text
    assert all(set(tags) == {"O"} for _, tags, _, _ in bare.values())
    assert "brand_lookup" not in {intent for _, _, intent, _ in bare.values()}


def test_regions_from_a_product_category_map():
    fed = load_esci(path=str(JOINED), region_by="category_map",
                    category_map=str(FIXTURES / "category_map_products.csv"),
                    clients_per_region=2)
    assert fed.regions == ["electronics_food", "fashion_home"]
    regions = {" ".join(t): r for t, r in zip(everything(fed).targets, everything(fed).region,
                                              strict=True)}
    assert regions["cheap nike red running shoes"] == "fashion_home"
    assert regions["zapatillas nike rojas"] == "fashion_home"  # across locales
    assert regions["lego star wars"] == "electronics_food"
    assert "desk lamp" not in regions and fed.meta["source"]["unmapped_queries"] == 1


def test_regions_from_a_query_category_map():
    fed = load_esci(path=str(JOINED), region_by="category_map",
                    category_map=str(FIXTURES / "category_map_queries.csv"),
                    clients_per_region=2)
    assert fed.regions == ["north", "south"]
    assert Counter(everything(fed).region) == {"north": 9, "south": 9}


def test_max_queries_keeps_a_seeded_sample():
    fed = load_esci(path=str(JOINED), max_queries=12, clients_per_region=1)
    assert len(everything(fed)) == 12 == fed.meta["source"]["queries"]


# ------------------------------------------------------------------------------ errors


def test_missing_file():
    with pytest.raises(DataError, match="ESCI examples file not found at .*nope.csv"):
        load_esci(path=str(FIXTURES / "nope.csv"))
    with pytest.raises(DataError, match="is not a file"):
        load_esci(path=str(FIXTURES))


def test_missing_columns_are_all_named_with_the_file(tmp_path):
    rows, columns = fixture_rows()
    path = rewrite(tmp_path, rows, [c for c in columns if c not in ("esci_label",
                                                                   "product_locale")])
    with pytest.raises(DataError) as err:
        load_esci(path=str(path))
    message = str(err.value)
    assert str(path) in message and "lacks column(s) product_locale, esci_label" in message


@pytest.mark.parametrize("column, value, fragment", [
    ("esci_label", "X", "esci_label 'X' is not one of E, S, C, I"),
    ("esci_label", "", "esci_label '' is not one of"),
    ("product_locale", " ", "empty product_locale"),
])
def test_bad_values_name_the_row(tmp_path, column, value, fragment):
    rows, columns = fixture_rows()
    rows[2][column] = value
    path = rewrite(tmp_path, rows, columns)
    with pytest.raises(DataError, match=f"examples.csv, row 3 .*{fragment}"):
        load_esci(path=str(path))


def test_short_csv_rows_name_the_row(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("query,query_id,product_id,product_locale,esci_label\n"
                    "a b,1,P1,us,E\nc d,2,P2,us\n")
    with pytest.raises(DataError, match=r"short.csv, row 2 \(line 3\): 4 fields"):
        load_esci(path=str(path))


@pytest.mark.parametrize("overrides, fragment", [
    ({"region_by": "country"}, "region_by"),
    ({"region_by": "category_map"}, "needs category_map"),
    ({"category_map": "map.csv"}, "only used with region_by=category_map"),
    ({"clients_per_region": 0}, "clients_per_region"),
    ({"bogus": 1}, "bogus: unknown key"),
])
def test_bad_config_is_a_config_error(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_esci(path=str(JOINED), **overrides)


def test_bad_category_maps(tmp_path):
    bad = tmp_path / "map.csv"
    bad.write_text("asin,region\nB0NIKE0001,x\n")
    with pytest.raises(DataError, match="exactly one of the columns product_id, query_id"):
        load_esci(path=str(JOINED), region_by="category_map", category_map=str(bad))
    bad.write_text("product_id\nB0NIKE0001\n")
    with pytest.raises(DataError, match="lacks column.*region"):
        load_esci(path=str(JOINED), region_by="category_map", category_map=str(bad))
    bad.write_text("product_id,region\nB0NIKE0001,a\nB0NIKE0001,b\n")
    with pytest.raises(DataError, match="row 2 .*mapped to both 'a' and 'b'"):
        load_esci(path=str(JOINED), region_by="category_map", category_map=str(bad))
    bad.write_text("query_id,region\n999,a\n")
    with pytest.raises(DataError, match="covers none of the queries"):
        load_esci(path=str(JOINED), region_by="category_map", category_map=str(bad))
    with pytest.raises(DataError, match="ESCI category map not found"):
        load_esci(path=str(JOINED), region_by="category_map",
                  category_map=str(tmp_path / "none.csv"))


def test_too_few_queries_in_a_region_names_the_region():
    with pytest.raises(DataError, match="region 'es' has 6 queries, too few for 6 clients"):
        load_esci(path=str(JOINED), clients_per_region=6)


def test_the_official_parquet_files_load_like_the_csv_ones(tmp_path):
    """``shopping_queries_dataset_{examples,products}.parquet`` as published (integer ids and
    flags, null product fields), found by ``--data-dir``: the same federation as the csv."""
    pa = pytest.importorskip("pyarrow")
    import csv

    from pyarrow import parquet

    from regionfed.data.data_dir import data_dir_overrides

    integers = {"example_id", "query_id", "small_version", "large_version"}
    for name in ("examples", "products"):
        rows = list(csv.DictReader((FIXTURES / f"{name}.csv").open(encoding="utf-8")))
        table = pa.table({k: [(int(r[k]) if k in integers and r[k] else r[k] or None)
                              for r in rows]
                          for k in rows[0]})
        parquet.write_table(table, tmp_path / f"shopping_queries_dataset_{name}.parquet")
    paths = data_dir_overrides("esci", tmp_path)
    assert paths == {"data.path": str(tmp_path / "shopping_queries_dataset_examples.parquet"),
                     "data.products_path": str(
                         tmp_path / "shopping_queries_dataset_products.parquet")}
    from_parquet = load_esci(path=paths["data.path"], products_path=paths["data.products_path"])
    from_csv = load_esci(path=str(FIXTURES / "examples.csv"),
                         products_path=str(FIXTURES / "products.csv"))
    assert by_target(from_parquet) == by_target(from_csv)


def test_parquet_needs_pyarrow(tmp_path, monkeypatch):
    path = tmp_path / "examples.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # absent, whether installed or not
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match="needs pyarrow: pip install pyarrow"):
        load_esci(path=str(path))


# ------------------------------------------------------------------------------ real data


needs_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"{SHARED} not present")


@needs_shared
def test_shared_esci_examples_have_the_official_schema():
    table = open_table(SHARED, "ESCI examples file")
    assert set(OFFICIAL + PRODUCT) <= set(table.columns)
    rows = [row for _, row in table.rows()]
    assert len(rows) == 785
    assert Counter(r["product_locale"] for r in rows) == {"us": 730, "es": 55}
    assert {r["esci_label"] for r in rows} <= {"E", "S", "C", "I"}
    queries, n = read_queries(EsciConfig(path=str(SHARED)))
    assert n == 785 and 200 <= len(queries) <= 300  # one example per query, not per row


@needs_shared
def test_shared_esci_examples_load_as_us_and_es_regions():
    with pytest.raises(DataError, match="region 'es' has 2 queries"):
        load_esci(path=str(SHARED))  # 4 clients per region: es is too small
    fed = load_esci(path=str(SHARED), clients_per_region=1)
    assert fed.regions == ["es", "us"]
    sizes = {r: sum(fed.region_sizes(s)[r] for s in ("train", "val", "test"))
             for r in fed.regions}
    assert sizes["es"] == 2 and 200 <= sizes["us"] <= 300
    intents = Counter(INTENTS[i] for i in everything(fed).intent)
    assert intents["product_search"] > intents["brand_lookup"] > 0
    assert any(t != "O" for tags in everything(fed).ner for t in tags)


@pytest.mark.skipif(not JUDGMENTS.exists(), reason=f"{JUDGMENTS} not present")
def test_shared_judgments_without_query_id_load_with_text_ids():
    """``esci_us_judgments_150q.csv`` (query, product_id, product_locale, esci_label, gain):
    query_id is derived from the text; no product text, so NER is all O."""
    assert "query_id" not in open_table(JUDGMENTS, "judgments").columns
    fed = load_esci(path=str(JUDGMENTS))
    assert fed.regions == ["us"] and len(fed.clients) == 4
    assert fed.meta["source"]["queries"] == 150 == fed.meta["source"]["query_ids_from_text"]
    assert fed.meta["source"]["rows"] == 6678
    assert all(set(tags) == {"O"} for tags in everything(fed).ner)


def test_queries_with_the_same_text_under_different_ids_share_one_split(tmp_path):
    # 40 queries, 10 texts each under 4 ids and two locales: a random split would put
    # copies of a text in training and test
    path = tmp_path / "repeats.csv"
    lines = ["query,query_id,product_id,product_locale,esci_label"]
    for i in range(40):
        lines.append(f"red shoe {i % 10},{i},P{i},{'us' if i % 2 else 'es'},E")
    path.write_text("\n".join(lines) + "\n")
    for seed in range(5):
        fed = load_esci(path=str(path), clients_per_region=2, seed=seed)
        texts = {s: {" ".join(t) for c in fed.clients for t in c.split(s).source}
                 for s in ("train", "val", "test")}
        assert texts["test"], "every region keeps a test query"
        assert not texts["train"] & texts["test"]
        assert not texts["train"] & texts["val"]
        assert fed.meta["source"]["duplicate_texts"] == 30
