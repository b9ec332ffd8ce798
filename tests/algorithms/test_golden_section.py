import math

import pytest

from regionfed.algorithms.regionfed.golden_section import GoldenSection, golden_section_minimize


@pytest.mark.parametrize("f, a, b, x_star", [
    (lambda x: (x - 0.7) ** 2, 0.0, 2.0, 0.7),
    (lambda x: abs(x - 1.3) + 0.2, 0.0, 2.0, 1.3),
    (lambda x: math.cosh(x - 0.25), 0.0, 1.0, 0.25),
    (lambda x: (x + 1.0) ** 2, 0.0, 2.0, 0.0),  # minimum at the left end
    (lambda x: -x, 0.0, 2.0, 2.0),  # at the right end
])
def test_finds_the_minimum_of_known_unimodal_functions(f, a, b, x_star):
    x, fx, evaluations = golden_section_minimize(f, a, b, tol=0.01)
    assert abs(x - x_star) <= 0.01
    assert fx == pytest.approx(f(x))
    assert evaluations <= 15


def test_evaluation_count_follows_the_golden_ratio():
    calls = []
    golden_section_minimize(lambda x: calls.append(x) or (x - 0.3) ** 2, 0.0, 2.0, tol=0.01)
    assert len(calls) == 14 and len(set(calls)) == 14  # left end + 2 + 11 shrinks, no repeats
    assert calls[0] == 0.0


def test_never_worse_than_the_left_end():
    search = GoldenSection(0.0, 1.0, 0.01)
    while (x := search.ask()) is not None:
        search.tell(1.0 if x == 0.0 else 2.0 + x)  # everything is worse than x = 0
    assert search.best == (0.0, 1.0)


def test_invalid_arguments():
    with pytest.raises(ValueError):
        GoldenSection(1.0, 1.0)
    with pytest.raises(ValueError):
        GoldenSection(0.0, 1.0, tol=0.0)
    with pytest.raises(RuntimeError):
        GoldenSection(0.0, 1.0).tell(1.0)
