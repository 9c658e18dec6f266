"""hpcprof.report.stats (no scipy in the dependencies, and none in the venv to check against):
Student's t quantiles against the published table (NIST/SEMATECH e-Handbook 1.3.6.7.2), the CDF
against a numerical integration of the t density, confidence intervals and Welch's test against
their formulas worked by hand."""

from __future__ import annotations

import math

import pytest

from hpcprof.report.stats import ci_halfwidth, mean_sd, t_cdf, t_quantile, welch

#: t_{0.975, df} as printed in the NIST/SEMATECH table of upper critical values (3 decimals)
T_TABLE_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 20: 2.086, 30: 2.042, 100: 1.984}
T_TABLE_95 = {1: 6.314, 3: 2.353, 10: 1.812, 30: 1.697}


def t_density(x: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
        * (1 + x * x / df) ** (-(df + 1) / 2)


def integrated_cdf(t: float, df: float, steps: int = 20000) -> float:
    """P(T <= t) = 1/2 + the integral of the density from 0 to t (Simpson's rule), independent
    of the incomplete beta function stats.py uses."""
    h = t / steps
    total = t_density(0, df) + t_density(t, df)
    total += sum((4 if i % 2 else 2) * t_density(i * h, df) for i in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize("df, expected", sorted(T_TABLE_975.items()))
def test_t_quantile_975_matches_the_published_table(df: int, expected: float) -> None:
    assert round(t_quantile(0.975, df), 3) == expected


@pytest.mark.parametrize("df, expected", sorted(T_TABLE_95.items()))
def test_t_quantile_95_matches_the_published_table(df: int, expected: float) -> None:
    assert round(t_quantile(0.95, df), 3) == expected


@pytest.mark.parametrize("t, df", [(0.5, 1), (2.0, 5), (-1.5, 2.5), (3.1, 7.3), (1.0, 40), (-0.2, 3)])
def test_t_cdf_matches_the_integrated_density(t: float, df: float) -> None:
    assert t_cdf(t, df) == pytest.approx(integrated_cdf(t, df), abs=1e-9)
    assert t_quantile(t_cdf(t, df), df) == pytest.approx(t, abs=1e-8)


def test_t_cdf_tends_to_the_normal() -> None:
    assert t_cdf(1.959963985, 1e7) == pytest.approx(0.975, abs=1e-6)


def test_confidence_interval_by_hand() -> None:
    values = [30.347, 30.3519, 30.2693, 30.2677]
    mean = sum(values) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    assert mean_sd(values) == pytest.approx((mean, sd))
    assert ci_halfwidth(values) == pytest.approx(3.182446 * sd / 2, rel=1e-6)
    assert math.isnan(ci_halfwidth([1.0]))


def test_welch_by_hand() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0, 6.0]
    va, vb = (5 / 3) / 4, 2.5 / 5                      # sample variances 5/3 and 5/2 over n
    t_hand = (2.5 - 4.0) / math.sqrt(va + vb)
    df_hand = (va + vb) ** 2 / (va ** 2 / 3 + vb ** 2 / 4)
    t, df, p = welch(a, b)
    assert (t, df) == pytest.approx((t_hand, df_hand))
    assert t == pytest.approx(-1.5667, abs=1e-4) and df == pytest.approx(6.9808, abs=1e-4)
    assert p == pytest.approx(2 * (1 - integrated_cdf(abs(t_hand), df_hand)), abs=1e-8)
    assert welch([2.0, 2.0], [2.0, 2.0])[2] == 1.0 and welch([1.0, 1.0], [2.0, 2.0])[2] == 0.0
    with pytest.raises(ValueError):
        welch([1.0], [1.0, 2.0])
