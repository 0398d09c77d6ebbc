"""Risk allocation over request fractions (models.levels) and blockwise calibration, by hand."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from features.table import TARGETS, build_training_table
from models.calibrate import blockwise, failure_budget, time_blocks
from models.levels import (
    FRACTIONS,
    MAX_JOB_RISK,
    calibrate_lambda,
    candidate_levels,
    choose,
    fraction_class,
    met_probability,
)
from models.train import (
    TrainParams,
    _fit_predictor,
    calibrate,
    target_rows,
    time_split,
    train_target,
)
from tests.predict_data import GIB, synthetic_cluster

CPUS = TARGETS["cpus"]


def test_fraction_class_and_levels_by_hand() -> None:
    request = np.array([100.0, 100.0, 100.0, 100.0])
    classes = fraction_class(np.array([0.05, 5.0, 30.0, 101.0]), request)
    assert classes.tolist() == [0, 6, 11, len(FRACTIONS)]  # 0.1 %, 5 %, 30 %, more than asked
    assert FRACTIONS[classes[1]] == 0.05 and FRACTIONS[classes[2]] == 0.3
    levels = candidate_levels(np.array([4.0]), CPUS)[0]
    # Whole CPUs, at least one, never above the request; the last level is the request itself.
    assert levels[0] == 1 and levels[-1] == 4 and (np.diff(levels) >= 0).all()
    assert set(levels.tolist()) == {1.0, 2.0, 3.0, 4.0}


def test_met_probability_is_conditional_on_the_request_sufficing() -> None:
    probs = np.zeros((1, len(FRACTIONS) + 1))
    probs[0, 10] = 0.5  # needs <= 20 % of its request
    probs[0, -2] = 0.3  # needs the whole request
    probs[0, -1] = 0.2  # needs more than it asked for
    met = met_probability(probs)[0]
    assert met[9] == 0.0 and met[10] == pytest.approx(0.625) and met[-2] == pytest.approx(0.625)
    assert met[-1] == 1.0 and (np.diff(met) >= 0).all()
    certain = np.zeros((1, len(FRACTIONS) + 1))
    certain[0, 0] = 1.0
    assert met_probability(certain)[0, 0] == pytest.approx(1 - 1e-6)  # never certain below the request


def test_choose_trades_gain_against_risk_and_never_offers_a_long_shot() -> None:
    levels = np.array([[10.0, 50.0, 100.0]])
    request, weight = np.array([100.0]), np.array([1.0])
    met = np.array([[0.95, 0.999, 1.0]])
    assert choose(levels, met, request, weight, 0.0)[0] == 10.0  # gain 90 x 0.95 beats 50 x 0.999
    assert choose(levels, met, request, weight, 2000.0)[0] == 50.0  # 90 x .95 - 100 < 50 x .999 - 2
    assert choose(levels, met, request, weight, math.inf)[0] == 100.0  # the request
    risky = np.array([[1 - MAX_JOB_RISK - 0.01, 0.999, 1.0]])
    assert choose(levels, risky, request, weight, 0.0)[0] == 50.0  # the long shot is not on offer


def test_lambda_is_the_smallest_within_the_failure_budget() -> None:
    rng = np.random.default_rng(3)
    n = 2000
    request = rng.uniform(2, 64, n).round()
    required = request * rng.uniform(0.05, 1.0, n)
    levels = candidate_levels(request, CPUS)
    # An informative but imperfect classifier: confident in a class up to three away from the true one.
    guess = np.clip(fraction_class(required, request) + rng.integers(-3, 2, n), 0, len(FRACTIONS))
    probs = np.full((n, len(FRACTIONS) + 1), 0.002)
    probs[np.arange(n), guess] += 1.0
    probs /= probs.sum(axis=1, keepdims=True)
    met = met_probability(probs)
    weight = rng.uniform(1, 10, n)
    lam = calibrate_lambda(required, request, levels, met, weight, 0.02, 0.9)
    budget = failure_budget(n, 0.02, 0.9)

    def short(value: float) -> int:
        return int((choose(levels, met, request, weight, value) < required).sum())

    assert 0 < lam < math.inf and short(lam) <= budget < short(lam * 0.99)
    # The short count never grows with lambda (what makes the smallest lambda a conformal threshold).
    counts = [short(v) for v in np.geomspace(1e-3, 1e6, 60)]
    assert all(a >= b for a, b in itertools.pairwise(counts))
    # Too few jobs for a 2 % budget at 90 % confidence: the request.
    assert calibrate_lambda(
        required[:100], request[:100], levels[:100], met[:100], weight[:100], 0.02, 0.9
    ) == (math.inf)


def test_time_blocks_and_blockwise_by_hand() -> None:
    stamps = pd.Series(pd.date_range("2026-01-01", periods=1000, freq="h"))
    shuffled = stamps.sample(frac=1.0, random_state=1).reset_index(drop=True)
    blocks = time_blocks(shuffled)
    assert sorted(np.bincount(blocks).tolist()) == [500, 500]  # 1000 jobs: two blocks of 500
    assert shuffled[blocks == 0].max() < shuffled[blocks == 1].min()  # consecutive in time, not in rows
    assert set(time_blocks(stamps.head(999)).tolist()) == {0}
    many = pd.Series(pd.date_range("2026-01-01", periods=9000, freq="min"))
    assert set(time_blocks(many).tolist()) == set(range(8))  # at most 8 blocks
    offsets = {0: 0.5, 1: 1.5}
    assert blockwise(lambda mask: offsets[int(blocks[mask][0])], blocks) == 1.5


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    jobs, scripts = synthetic_cluster(3000, n_users=25, seed=11)
    return build_training_table(jobs, scripts, {"A100-SXM4-80GB": 80 * GIB})


def test_levels_predictor_answers_request_less_jobs_with_its_companion(table: pd.DataFrame) -> None:
    spec = TARGETS["runtime"]
    params = TrainParams(num_boost_round=30, embedding_dims=4)
    companion = train_target(table, spec, replace(params, quantile=0.9, spread="none"), 0.05).predictor
    split = time_split(target_rows(table, spec), params.train_frac, params.cal_frac)
    levels = _fit_predictor(split.train, spec, params, 0.05, levels=True)
    levels.companion = companion
    calibrate(levels, split.cal, spec, 0.05, 0.9)
    assert math.isfinite(levels.lam) and levels.variant == "levels" and levels.margin_pct == math.inf
    test = split.test.head(50).copy()
    asked = levels.predict(test)
    assert (asked <= test[spec.request]).all() and (asked % 60 == 0).all()  # whole minutes, capped
    test[spec.request] = np.nan
    assert levels.predict(test).tolist() == companion.predict(test).tolist()
