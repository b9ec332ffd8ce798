import math

import pytest
from scipy.optimize import minimize_scalar

from regionfed.algorithms.regionfed.line_search import (
    BrentSearch,
    GoldenSection,
    golden_section_minimize,
    line_search_minimize,
)

KNOWN_MINIMA = [
    (lambda x: (x - 0.7) ** 2, 0.0, 2.0, 0.7),
    (lambda x: abs(x - 1.3) + 0.2, 0.0, 2.0, 1.3),
    (lambda x: math.cosh(x - 0.25), 0.0, 1.0, 0.25),
    (lambda x: (x + 1.0) ** 2, 0.0, 2.0, 0.0),  # minimum at the left end
    (lambda x: -x, 0.0, 2.0, 2.0),  # at the right end
]


@pytest.mark.parametrize("method", ["golden", "brent"])
@pytest.mark.parametrize("f, a, b, x_star", KNOWN_MINIMA)
def test_finds_the_minimum_of_known_unimodal_functions(f, a, b, x_star, method):
    x, fx, evaluations = line_search_minimize(f, a, b, tol=0.01, method=method)
    assert abs(x - x_star) <= 0.01
    assert fx == pytest.approx(f(x))
    assert evaluations <= 15


def test_evaluation_count_follows_the_golden_ratio():
    calls = []
    golden_section_minimize(lambda x: calls.append(x) or (x - 0.3) ** 2, 0.0, 2.0, tol=0.01)
    assert len(calls) == 14 and len(set(calls)) == 14  # left end + 2 + 11 shrinks, no repeats
    assert calls[0] == 0.0


@pytest.mark.parametrize("f, a, b", [
    (lambda x: (x - 0.7) ** 2, 0.0, 2.0),
    (lambda x: abs(x - 1.3) + 0.2, 0.0, 2.0),
    (lambda x: math.cosh(x - 0.25) + 0.1 * math.sin(7 * x), 0.0, 1.0),
    (lambda x: (x + 1.0) ** 2, 0.0, 2.0),
    (lambda x: -x, 0.0, 2.0),
    (lambda x: (x - 1.9) ** 4 - 0.3 * x, 0.0, 2.0),
    (lambda x: math.exp(-x) * math.log1p(x * x) + 0.01 * x, 0.0, 3.0),
])
@pytest.mark.parametrize("tol", [0.01, 0.05])
def test_brent_takes_scipys_bounded_steps_after_the_left_end(f, a, b, tol):
    """The known answer: scipy's ``minimize_scalar(method="bounded")`` evaluates the same
    points in the same order (ours evaluates ``a`` first) and ends on the same point."""
    scipy_points = []
    result = minimize_scalar(lambda x: scipy_points.append(float(x)) or f(x), bounds=(a, b),
                             method="bounded", options={"xatol": tol})
    ours = []
    x, fx, evaluations = line_search_minimize(lambda x: ours.append(x) or f(x), a, b, tol,
                                              method="brent")
    assert ours[0] == a
    assert ours[1:] == pytest.approx(scipy_points, abs=1e-12)
    assert evaluations == result.nfev + 1
    if f(a) > result.fun:
        assert (x, fx) == pytest.approx((float(result.x), float(result.fun)), abs=1e-12)
    else:
        assert (x, fx) == (a, f(a))


def test_brent_needs_fewer_evaluations_than_golden_on_a_smooth_loss():
    def loss(x):
        return 3.0 + 0.4 * (x - 0.83) ** 2 + 0.05 * (x - 0.83) ** 3

    _, _, golden = line_search_minimize(loss, 0.0, 2.0, 0.01, "golden")
    x, _, brent = line_search_minimize(loss, 0.0, 2.0, 0.01, "brent")
    assert abs(x - 0.83) <= 0.01
    assert brent <= 0.6 * golden  # parabolic steps: superlinear near a smooth minimum


@pytest.mark.parametrize("search", [GoldenSection, BrentSearch])
def test_never_worse_than_the_left_end(search):
    search = search(0.0, 1.0, 0.01)
    while (x := search.ask()) is not None:
        search.tell(1.0 if x == 0.0 else 2.0 + x)  # everything is worse than x = 0
    assert search.best == (0.0, 1.0)


@pytest.mark.parametrize("search", [GoldenSection, BrentSearch])
def test_non_finite_values_are_never_the_best(search):
    search = search(0.0, 2.0, 0.01)
    while (x := search.ask()) is not None:
        search.tell(math.nan if x > 1.0 else (x - 0.5) ** 2)
    x, fx = search.best
    assert math.isfinite(fx) and abs(x - 0.5) <= 0.01


@pytest.mark.parametrize("search", [GoldenSection, BrentSearch])
def test_invalid_arguments(search):
    with pytest.raises(ValueError, match="a < b"):
        search(1.0, 1.0)
    with pytest.raises(ValueError, match="tolerance"):
        search(0.0, 1.0, tol=0.0)
    with pytest.raises(RuntimeError):
        search(0.0, 1.0).tell(1.0)
