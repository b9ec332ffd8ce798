"""Character-aware word features for the ``tiny`` query model.

Two data-side functions of *public* information only (the benchmark's word list), so no
client data is pooled to build them:

* :func:`word_ngram_ids` hashes a word's character n-grams (with ``<``/``>`` boundary marks)
  and the whole word into a modest number of buckets, so a misspelt word shares most of its
  features with the clean word instead of collapsing to one OOV id (fastText-style subwords).
* :class:`SpellCandidates` proposes, for any surface form, the vocabulary words within a
  small *deletion distance* (SymSpell: the least number of character deletions, on either
  side, that makes the two strings equal; one substitution costs 2, one insertion or
  deletion costs 1). The model then only scores these candidates, which keeps the spell head
  free of a vocabulary-sized output layer.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import torch

PAD_NGRAM = 0  # bucket 0 is reserved for padding


def _stable_bucket(text: str, buckets: int) -> int:
    # crc32, not hash(): Python's string hash is salted per process.
    return 1 + zlib.crc32(text.encode("utf-8")) % (buckets - 1)


def word_ngram_ids(word: str, buckets: int, max_ngrams: int, n_values: Sequence[int] = (2, 3)
                   ) -> list[int]:
    """Bucket ids of ``word``'s whole-word token and its character n-grams, padded with 0."""
    marked = f"<{word}>"
    ids = [_stable_bucket("w:" + word, buckets)]
    for n in n_values:
        for i in range(len(marked) - n + 1):
            ids.append(_stable_bucket(f"{n}:{marked[i:i + n]}", buckets))
    ids = ids[:max_ngrams]
    return ids + [PAD_NGRAM] * (max_ngrams - len(ids))


def _deletes(word: str, depth: int) -> dict[str, int]:
    """Every string reachable from ``word`` by up to ``depth`` deletions → fewest deletions."""
    out = {word: 0}
    frontier = {word}
    for d in range(1, depth + 1):
        nxt = set()
        for w in frontier:
            for i in range(len(w)):
                v = w[:i] + w[i + 1:]
                if v and v not in out:
                    out[v] = d
                    nxt.add(v)
        frontier = nxt
    return out


class SpellCandidates:
    """Vocabulary words within deletion distance ``max_distance`` of a surface form.

    Candidates are ranked by distance, then alphabetically (deterministic); at most ``k``.
    """

    def __init__(self, vocabulary: Iterable[str], k: int = 10, max_distance: int = 2) -> None:
        self.vocabulary = sorted(set(vocabulary))
        self.k = k
        self.max_distance = max_distance
        self._index: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for w in self.vocabulary:
            for variant, d in _deletes(w, max_distance).items():
                self._index[variant].append((w, d))
        self._cache: dict[str, list[tuple[str, int]]] = {}

    def __call__(self, form: str) -> list[tuple[str, int]]:
        """``[(word, distance), ...]`` for ``form``, nearest first."""
        hit = self._cache.get(form)
        if hit is not None:
            return hit
        best: dict[str, int] = {}
        for variant, d_form in _deletes(form, self.max_distance).items():
            for word, d_word in self._index.get(variant, ()):
                d = d_form + d_word
                if d <= self.max_distance and d < best.get(word, self.max_distance + 1):
                    best[word] = d
        ranked = sorted(best.items(), key=lambda wd: (wd[1], wd[0]))[: self.k]
        self._cache[form] = ranked
        return ranked


class FormTable:
    """Distinct surface forms (words) → ids, with one feature-id row per form (``features``,
    padded to ``width``); id 0 is the padding form, whose row is all 0."""

    def __init__(self, features: Callable[[str], list[int]], width: int) -> None:
        self._features = features
        self._ids: dict[str, int] = {"": 0}
        self._rows: list[list[int]] = [[0] * width]
        self._table: torch.Tensor | None = None

    def id(self, word: str) -> int:
        fid = self._ids.get(word)
        if fid is None:
            fid = len(self._rows)
            self._ids[word] = fid
            self._rows.append(self._features(word))
        return fid

    @property
    def table(self) -> torch.Tensor:
        """(forms, width) feature ids of every form seen so far."""
        have = 0 if self._table is None else len(self._table)
        if have < len(self._rows):
            # only the forms added since the last call are converted: with thousands of
            # clients each evaluation adds a few new words, and rebuilding the whole table
            # from Python lists every time dominated the run (8,000 clients: 54 s/eval)
            new = torch.tensor(self._rows[have:], dtype=torch.long)
            self._table = new if self._table is None else torch.cat([self._table, new])
        return self._table


def deletion_distance(a: str, b: str) -> int:
    """Fewest deletions (on both sides) that make ``a`` and ``b`` equal: len(a)+len(b)-2·LCS."""
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return len(a) + len(b) - 2 * prev[-1]
