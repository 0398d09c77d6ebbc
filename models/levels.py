"""Risk allocation over fractions of the request: which jobs may take the under-provision budget.

A uniform margin spends the failure budget evenly, on a 1-CPU job asking for 10 minutes as on a 128-CPU
job asking for two days. Here a LightGBM classifier estimates, per job, the probability that the job needs
no more than each fraction of its request (`FRACTIONS`); the recommendation is the level that maximises

    expected reclaim - lambda x failure probability
    = (request - level) x weight x P(met) - lambda x (1 - P(met)),

and one scalar lambda is calibrated on the calibration slice so that at most the failure budget of its
jobs fall short (`models.calibrate.failure_budget`). A larger lambda never picks a level with a higher
failure probability, so the jobs short at a given lambda shrink as it grows and the smallest lambda within
the budget is a split-conformal threshold: the rate guarantee does not depend on the classifier's
probabilities being right, only on their ranking of jobs. lambda = +inf is the request itself. Pure: arrays
and frames in, arrays out."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from features.table import TargetSpec
from models.calibrate import failure_budget, round_up, short_at_request

# Candidate recommendations as fractions of the job's request. Down to 0.1 %: grid jobs asking for days
# and running minutes (LPC-EGEE) need the low tail.
_LOW_TAIL = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15)
FRACTIONS = np.array([*_LOW_TAIL, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
# No level below the request is certain: a classifier's probability of 1.0 would make any gain worth it.
MAX_MET_PROBABILITY = 1 - 1e-6
# A level is offered only when the classifier gives it at most this chance of falling short. Without it
# the allocation gambled: on CTC-SP2 runtime, jobs cut to <= 5 % of their request failed half the time
# (a coin flip for the user, however low the fleet's rate), and such few, large bets drift most.
MAX_JOB_RISK = 0.1
# log(lambda) is searched in this range (lambda is in resource-seconds, like the gain).
_LOG_LAMBDA = (-30.0, 60.0)


def fraction_class(required: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Class k of each job: the first fraction whose share of the request covers the need; len(FRACTIONS)
    for a job that needed more than it asked for."""
    ratio = np.asarray(required, dtype="float64") / np.asarray(request, dtype="float64")
    return np.searchsorted(FRACTIONS, ratio - 1e-12, side="left")


def candidate_levels(request: np.ndarray, spec: TargetSpec) -> np.ndarray:
    """(jobs x fractions) recommendations: each fraction of the request, at least the target's floor,
    rounded up to its step, at most the request (the last column is the request)."""
    request = np.asarray(request, dtype="float64")[:, None]
    levels = round_up(np.maximum(request * FRACTIONS[None, :], spec.floor), spec.step)
    return np.minimum(levels, request)


def met_probability(class_probs: np.ndarray) -> np.ndarray:
    """(jobs x fractions) P(need <= fraction x request | need <= request) from the classifier's class
    probabilities; 1 at the request (a job whose request sufficed is met by it)."""
    cdf = np.cumsum(class_probs, axis=1)[:, : len(FRACTIONS)]
    met = np.minimum(cdf / np.maximum(cdf[:, -1:], 1e-12), MAX_MET_PROBABILITY)
    met[:, -1] = 1.0
    return met


def _raw_weight(table: pd.DataFrame, spec: TargetSpec) -> np.ndarray:
    column = "cpus_req" if spec.weight == "cpus_alloc" else "runtime_req_s"
    return np.asarray(table[column], dtype="float64")  # a frame's column, or a one-row table's array


def default_weight(table: pd.DataFrame, spec: TargetSpec) -> float:
    """The median submit-time weight of a (training) table: what a job without one is weighed by."""
    weight = _raw_weight(table, spec)
    known = weight[np.isfinite(weight) & (weight > 0)]
    return float(np.median(known)) if len(known) else 1.0


def submit_weight(table: pd.DataFrame, spec: TargetSpec, default: float) -> np.ndarray:
    """What turns a saving into resource-time, as known at submit: CPUs asked for (runtime), else the time
    limit (memory, VRAM and CPUs are held for the job's duration); `default` where it is not set."""
    weight = _raw_weight(table, spec)
    return np.where(np.isfinite(weight) & (weight > 0), weight, default)


def choose(
    levels: np.ndarray, met: np.ndarray, request: np.ndarray, weight: np.ndarray, lam: float
) -> np.ndarray:
    """The level per job maximising expected reclaim - lam x failure probability (the request at +inf)."""
    if not math.isfinite(lam):
        return levels[:, -1].copy()
    gain = (np.asarray(request, dtype="float64")[:, None] - levels) * np.asarray(weight, dtype="float64")[
        :, None
    ]
    objective = np.where(met >= 1 - MAX_JOB_RISK, gain * met - lam * (1 - met), -np.inf)
    best = np.argmax(objective, axis=1)
    return levels[np.arange(len(levels)), best]


def calibrate_lambda(
    required: np.ndarray,
    request: np.ndarray,
    levels: np.ndarray,
    met: np.ndarray,
    weight: np.ndarray,
    rate: float,
    confidence: float | None,
) -> float:
    """The smallest lambda leaving at most the failure budget of calibration jobs short (jobs whose
    request did not suffice are not counted); +inf when the slice is too small for any budget."""
    required = np.asarray(required, dtype="float64")
    counted = ~short_at_request(required, request)
    budget = failure_budget(int(counted.sum()), rate, confidence)
    if budget < 0:
        return math.inf
    levels, met, required = levels[counted], met[counted], required[counted]
    request, weight = np.asarray(request)[counted], np.asarray(weight)[counted]

    def short(log_lam: float) -> int:
        return int((choose(levels, met, request, weight, math.exp(log_lam)) < required).sum())

    lo, hi = _LOG_LAMBDA
    if short(lo) <= budget:
        return math.exp(lo)
    if short(hi) > budget:
        return math.inf
    for _ in range(50):  # bisection on log lambda: the short count is non-increasing in lambda
        mid = (lo + hi) / 2
        if short(mid) <= budget:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)
