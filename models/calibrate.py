"""Split-conformal calibration on a log scale: shift predictions so at most a set share fall short."""

from __future__ import annotations

import math

import numpy as np


def conformal_offset(
    scores: np.ndarray, rate: float, fixed_failures: int = 0, n_total: int | None = None
) -> float:
    """The smallest log-shift c such that at most the conformal budget of calibration jobs has score > c.

    `scores` = log(required) - log(prediction) of the jobs whose prediction the shift applies to; other
    jobs of the slice (`n_total` in all) keep fixed predictions, of which `fixed_failures` fall short.
    Budget: n_total - ceil((n_total + 1) * (1 - rate)) failures (the split-conformal quantile), so the
    held-out under-provision rate is <= `rate` in expectation. When fixed failures already exceed the
    budget, the shift removes every adjustable failure (the rate then is what the fixed jobs give)."""
    scores = np.sort(np.asarray(scores, dtype="float64"))
    n_total = len(scores) if n_total is None else n_total
    if len(scores) == 0:
        return 0.0
    budget = n_total - math.ceil((n_total + 1) * (1 - rate)) - fixed_failures
    if budget < 0:
        return float(scores[-1])
    if budget >= len(scores):
        return float(scores[0]) - 1e-9
    return float(scores[len(scores) - 1 - budget])


def shortfall_scores(required: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """log(required) - log(predicted): positive where the prediction falls short."""
    return np.log(np.asarray(required, dtype="float64")) - np.log(np.asarray(predicted, dtype="float64"))


def max_expected_rate(rate: float, n: int, sigmas: float = 2.0) -> float:
    """The under-provision rate a calibrated predictor stays below on n held-out jobs, within sampling
    error (binomial standard deviation x sigmas)."""
    return rate + sigmas * math.sqrt(rate * (1 - rate) / max(n, 1))


def cap_at_request(predicted: np.ndarray, request: np.ndarray) -> np.ndarray:
    """A recommendation never above what the job asked for (where the request is known)."""
    predicted = np.asarray(predicted, dtype="float64")
    request = np.asarray(request, dtype="float64")
    return np.where(np.isfinite(request), np.minimum(predicted, request), predicted)


def capped_offset(
    required: np.ndarray,
    predicted: np.ndarray,
    request: np.ndarray,
    rate: float,
    fixed_failures: int = 0,
    n_total: int | None = None,
) -> float:
    """Conformal log-shift for recommendations min(predicted x e^c, request), with the rate counted over
    jobs whose request sufficed. A job that needed more than it requested (censored OOM/TIMEOUT) is short
    under any capped recommendation, the request included: it is left out of the budget and the scores.
    `fixed_failures` / `n_total` describe other jobs of the slice whose prediction the shift does not move."""
    required = np.asarray(required, dtype="float64")
    request = np.asarray(request, dtype="float64")
    short = short_at_request(required, request)
    scores = shortfall_scores(required[~short], np.asarray(predicted, dtype="float64")[~short])
    n_total = (len(required) if n_total is None else n_total) - int(short.sum())
    return conformal_offset(scores, rate, fixed_failures=fixed_failures, n_total=n_total)


def short_at_request(required: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Jobs whose own request was below what they needed (short whatever is recommended under the cap)."""
    request = np.asarray(request, dtype="float64")
    return np.isfinite(request) & (request < np.asarray(required, dtype="float64"))
