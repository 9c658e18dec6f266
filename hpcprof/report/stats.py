"""Statistics for verdicts without scipy: Student's t distribution (CDF through the regularized
incomplete beta function, quantile by bisection), 95 % confidence intervals of a mean and
Welch's unequal-variance t-test. Checked against published t tables in tests/test_compare_stats.py."""

from __future__ import annotations

import math
from collections.abc import Sequence

LEVEL = 0.95      # confidence level of every interval
ALPHA = 0.05      # significance level of every verdict


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by Lentz's continued fraction
    (Numerical Recipes 6.4), used on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * result / a


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` (real, > 0) degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (0 < p < 1), by bisection on `t_cdf` to 1e-12."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability {p} outside (0, 1)")
    low, high = -1.0, 1.0
    while t_cdf(low, df) > p:
        low *= 2.0
    while t_cdf(high, df) < p:
        high *= 2.0
    while high - low > 1e-12 * max(1.0, abs(high)):
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2.0


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); sd is nan for one value."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return mean, sd


def ci_halfwidth(values: Sequence[float], level: float = LEVEL) -> float:
    """Half-width of the Student-t confidence interval of the mean: t_{(1+level)/2, n-1} * sd / sqrt(n)
    (nan for fewer than 2 values)."""
    n = len(values)
    if n < 2:
        return math.nan
    return t_quantile((1.0 + level) / 2.0, n - 1) * mean_sd(values)[1] / math.sqrt(n)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t-test of mean(a) != mean(b): (t, Welch-Satterthwaite degrees of freedom, two-sided
    p). Both samples need 2 values or more; with no variance in either, p is 1 for equal means
    and 0 otherwise."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least 2 values per sample")
    (mean_a, sd_a), (mean_b, sd_b) = mean_sd(a), mean_sd(b)
    va, vb = sd_a ** 2 / len(a), sd_b ** 2 / len(b)
    if va + vb == 0.0:
        return (0.0, math.inf, 1.0) if mean_a == mean_b else (math.copysign(math.inf, mean_a - mean_b), math.inf, 0.0)
    t = (mean_a - mean_b) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, df, 2.0 * t_cdf(-abs(t), df)


def mean_above_zero(values: Sequence[float]) -> float:
    """One-sided p of Student's one-sample t-test of mean(values) > 0 (2 values or more; with no
    variance, 0 for a positive mean and 1 otherwise)."""
    if len(values) < 2:
        raise ValueError("a t-test needs at least 2 values")
    mean, sd = mean_sd(values)
    if sd == 0.0:
        return 0.0 if mean > 0 else 1.0
    return t_cdf(-mean / (sd / math.sqrt(len(values))), len(values) - 1)


def p_text(p: float, named: bool = False) -> str:
    """A p-value as printed: `< 1e-3`, `> 0.999`, else three decimals (never `0` or `1`);
    `named`: as `p < 1e-3`, `p = 0.291`."""
    text = "< 1e-3" if p < 1e-3 else "> 0.999" if p > 0.999 else f"{p:.3f}"
    return text if not named else f"p {text}" if text[0] in "<>" else f"p = {text}"
