"""Golden-section search for ρ (paper Alg. 3; Kiefer 1953).

For a unimodal f on [a, b] the bracket shrinks by 1/φ ≈ 0.618 per evaluation. The search is
written ask/tell so a runtime can evaluate f remotely (RegionFed evaluates every region's
candidate ρ on that region's clients in one exchange); :func:`golden_section_minimize` is
the plain-function form. The left end ``a`` is evaluated too, so the returned point is never
worse than ρ = a (for RegionFed: never worse than no personalization, on validation data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from typing import Any

import torch

from regionfed.algorithms.base import EVALUATE, FederationView, TrainInstruction

INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0  # 1/φ ≈ 0.618


class GoldenSection:
    """Minimise a unimodal function on [a, b] to bracket width ``tol``, one point at a time.

    ``ask()`` returns the next point to evaluate (``None`` when done), ``tell(f(x))`` reports
    its value. Evaluations: the left end, the two interior points, and one per further
    shrink while the bracket is wider than ``tol``: 14 for [0, 2] with tol 0.01, 13 for
    [0, 1].
    """

    def __init__(self, a: float, b: float, tol: float = 0.01) -> None:
        if not (math.isfinite(a) and math.isfinite(b) and a < b):
            raise ValueError(f"golden-section interval must satisfy a < b, got [{a}, {b}]")
        if not tol > 0:
            raise ValueError(f"golden-section tolerance must be > 0, got {tol}")
        self.a, self.b, self.tol = float(a), float(b), float(tol)
        self.c = self.b - INV_PHI * (self.b - self.a)
        self.d = self.a + INV_PHI * (self.b - self.a)
        self.fc: float | None = None
        self.fd: float | None = None
        self.history: list[tuple[float, float]] = []
        self._pending: float | None = None
        self._queue = [self.a, self.c, self.d]

    def ask(self) -> float | None:
        if self._pending is not None:
            return self._pending
        if not self._queue:
            self._advance()
            if not self._queue:
                return None
        self._pending = self._queue.pop(0)
        return self._pending

    def tell(self, value: float) -> None:
        if self._pending is None:
            raise RuntimeError("tell() without a pending ask()")
        x, self._pending = self._pending, None
        value = float(value) if math.isfinite(value) else math.inf
        self.history.append((x, value))
        if x == self.c and self.fc is None:
            self.fc = value
        elif x == self.d and self.fd is None:
            self.fd = value

    def _advance(self) -> None:
        """Golden-section steps: drop the worse side; queue the new interior point unless the
        bracket is already within tolerance (then the best evaluated point is the answer)."""
        while not self._queue and self.b - self.a > self.tol:
            if self.fc <= self.fd:  # minimum in [a, d]
                self.b, self.d, self.fd = self.d, self.c, self.fc
                self.c = self.b - INV_PHI * (self.b - self.a)
                self.fc = None
                if self.b - self.a > self.tol:
                    self._queue.append(self.c)
            else:  # minimum in [c, b]
                self.a, self.c, self.fc = self.c, self.d, self.fd
                self.d = self.a + INV_PHI * (self.b - self.a)
                self.fd = None
                if self.b - self.a > self.tol:
                    self._queue.append(self.d)

    @property
    def best(self) -> tuple[float, float]:
        """(x, f(x)) of the best point evaluated so far (ties: the smaller x)."""
        return min(self.history, key=lambda xf: (xf[1], xf[0]))

    @property
    def evaluations(self) -> int:
        return len(self.history)


def golden_section_minimize(f: Callable[[float], float], a: float, b: float,
                            tol: float = 0.01) -> tuple[float, float, int]:
    """(argmin, min, number of evaluations) of a unimodal ``f`` on [a, b]."""
    search = GoldenSection(a, b, tol)
    while (x := search.ask()) is not None:
        search.tell(f(x))
    x, fx = search.best
    return x, fx, search.evaluations


def search_regions_on_validation(
        view: FederationView, intervals: Mapping[str, tuple[float, float]], tol: float,
        candidate: Callable[[str, float], torch.Tensor]
) -> Generator[list[TrainInstruction], list[Any], dict[str, GoldenSection]]:
    """Golden-section search of each region's validation loss L_r(candidate(r, x)) over its
    interval, all regions in lock-step: each step scores every region's next point on all
    its clients in one exchange (``EVALUATE``; the loss is the example-weighted mean of the
    clients' ``loss_sum``). Returns the finished searches (``best``, ``history``)."""
    searches = {r: GoldenSection(*interval, tol) for r, interval in intervals.items()}
    while True:
        asks = {r: x for r, s in searches.items() if (x := s.ask()) is not None}
        if not asks:
            return searches
        points = {r: candidate(r, x) for r, x in asks.items()}
        results = yield [TrainInstruction(c, r, points[r], kind=EVALUATE)
                         for r in asks for c in view.clients_in(r)]
        for r in asks:
            mine = [res for res in results if res.region == r]
            total = sum(res.num_examples for res in mine)
            searches[r].tell(sum(res.metrics["loss_sum"] for res in mine) / max(total, 1))
