import random

import torch

from regionfed.models.text_features import (
    FormTable,
    SpellCandidates,
    deletion_distance,
    word_ngram_ids,
)


def test_misspelt_word_shares_most_ngrams_with_clean_word():
    clean = set(word_ngram_ids("laptop", 2048, 16)) - {0}
    typo = set(word_ngram_ids("lapttop", 2048, 16)) - {0}
    other = set(word_ngram_ids("banana", 2048, 16)) - {0}
    assert len(clean & typo) >= len(clean) // 2
    assert len(clean & typo) > len(clean & other)
    # stable across processes: crc32, not the salted built-in hash
    assert word_ngram_ids("laptop", 2048, 16) == word_ngram_ids("laptop", 2048, 16)
    assert len(word_ngram_ids("a" * 40, 2048, 16)) == 16


def test_deletion_distance_known_values():
    assert deletion_distance("laptop", "laptop") == 0
    assert deletion_distance("lapop", "laptop") == 1  # one deletion
    assert deletion_distance("lqptop", "laptop") == 2  # one substitution
    assert deletion_distance("colour", "color") == 1
    assert deletion_distance("jewellery", "jewelry") == 2


def test_candidates_find_every_single_edit_of_a_vocabulary_word():
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
                    for _ in range(2000)})
    cands = SpellCandidates(vocab, k=10)
    misses = 0
    for word in vocab[:300]:
        i = rng.randrange(len(word))
        op = rng.choice(["sub", "del", "ins"])
        if op == "sub":
            typo = word[:i] + rng.choice(letters.replace(word[i], "")) + word[i + 1:]
        elif op == "del":
            typo = word[:i] + word[i + 1:]
        else:
            typo = word[:i] + rng.choice(letters) + word[i:]
        found = [w for w, _ in cands(typo)]
        misses += word not in found
        for w, d in cands(typo):
            assert d == deletion_distance(typo, w) <= 2
    assert misses <= 3  # only when > k words tie at distance <= 2
    assert cands("laptop") == [] or all(d <= 2 for _, d in cands("laptop"))
    assert cands(vocab[0])[0] == (vocab[0], 0)  # an exact word ranks first


def test_form_table_grows_in_place_and_matches_a_table_built_at_once():
    def features(word: str) -> list[int]:
        return [len(word), ord(word[0]), 7]

    grown, at_once = FormTable(features, 3), FormTable(features, 3)
    words = ["shoe", "red", "lamp", "red", "usb", "cable"]
    for i, word in enumerate(words):
        assert grown.id(word) == at_once.id(word)
        if i % 2:
            grown.table  # noqa: B018 - materialize part-way, as evaluation does
    assert grown.table.shape == (6, 3)  # the pad form + 5 distinct words
    assert torch.equal(grown.table, at_once.table)
    assert grown.table[grown.id("lamp")].tolist() == [4, ord("l"), 7]
