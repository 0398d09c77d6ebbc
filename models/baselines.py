"""Baselines computed beside the model on the same split: request, last-two average, history quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.table import TARGETS, TargetSpec
from features.vram import CODE_ONLY_MARGIN
from models.calibrate import (
    blockwise,
    capped_offset,
    round_up,
    short_at_request,
    time_blocks,
)

# name -> (history column suffix per group, fixed log-margin or None when tuned on the calibration slice).
# VPA/KRR: p90 + 15 % margin (kubernetes/autoscaler DefaultRecommenderConfig); Tsafrir et al. 2007: mean
# of the user's last two jobs. "tuned" variants move the margin to hit the same under-provision rate.
BASELINES: dict[str, tuple[tuple[str, ...], float | None]] = {
    "request": ((), 0.0),
    "last2": (("u_{t}_hist_last2",), 0.0),
    "last2_tuned": (("u_{t}_hist_last2",), None),
    "user_p90_vpa": (("u_{t}_hist_p90",), float(np.log(1.15))),
    "user_p95_tuned": (("u_{t}_hist_p95",), None),
    "user_script_p95_tuned": (("us_{t}_hist_p95", "u_{t}_hist_p95"), None),
}
# Baselines of one target only. VRAM: the analytic estimate from the job's own code and config
# (features.code; docs/vram.md) with the margin `recommend` adds when there is no history, and the same with
# a margin tuned to the rate; a job whose code was not read falls back to its request like any baseline.
TARGET_BASELINES: dict[str, dict[str, tuple[tuple[str, ...], float | None]]] = {
    "vram": {
        "code_estimate": (("code_vram_est_log",), float(np.log1p(CODE_ONLY_MARGIN))),
        "code_estimate_tuned": (("code_vram_est_log",), None),
    },
}


def baselines_for(target: str) -> dict[str, tuple[tuple[str, ...], float | None]]:
    """The baselines scored for a target: BASELINES, then the target's own (TARGET_BASELINES)."""
    return {**BASELINES, **TARGET_BASELINES.get(target, {})}


@dataclass(frozen=True)
class Baseline:
    """A fitted baseline: history column(s) tried in order, a log-margin, a fallback for jobs with
    neither history nor a request (the training slice's high quantile of the need), and what a job
    without a request is at most advised (tuned baselines: the largest need seen in calibration, as the
    model's `Predictor.cap`; +inf for the fixed rules as shipped)."""

    name: str
    target: str
    columns: tuple[str, ...]
    margin_log: float
    default: float
    cap: float = math.inf

    def history_value(self, table: pd.DataFrame) -> np.ndarray:
        """The raw history estimate (target unit) per row; NaN where the user has no finished job that
        measured the target (history statistics are over measured jobs only: features.history). `table`
        is a frame or a one-row table (models.train.OneRow: a rule champion answers a query too)."""
        value = np.full(len(table), np.nan)
        for col in self.columns:
            found = np.exp(np.asarray(table[col.format(t=self.target)], dtype="float64"))
            value = np.where(np.isfinite(value), value, found)
        return value

    def limit(self, request: np.ndarray) -> np.ndarray:
        """What a recommendation may not exceed: the request, else the cap (+inf: none)."""
        return np.where(np.isfinite(request), request, self.cap)

    def predict(self, table: pd.DataFrame, request_col: str) -> np.ndarray:
        """Recommendation per row: history x exp(margin) rounded up to the target's step (as the model's)
        and capped at the request (else at `cap`), else the request, else the default (capped too)."""
        request = np.asarray(table[request_col], dtype="float64")
        fallback = np.where(np.isfinite(request), request, min(self.default, self.cap))
        spec = TARGETS[self.target]
        shifted = round_up(
            np.maximum(self.history_value(table) * np.exp(self.margin_log), spec.floor), spec.step
        )
        limit = self.limit(request)
        history = np.where(np.isfinite(limit), np.minimum(shifted, limit), shifted)
        return np.where(np.isfinite(history), history, fallback)

    @property
    def margin_pct(self) -> float:
        return float((np.exp(self.margin_log) - 1) * 100)

    @property
    def tuned(self) -> bool:
        """Whether its margin was calibrated to the rate (a rule that may be champion)."""
        return baselines_for(self.target)[self.name][1] is None


def fit_baselines(
    train: pd.DataFrame,
    cal: pd.DataFrame,
    spec: TargetSpec,
    rate: float,
    confidence: float | None = None,
) -> list[Baseline]:
    """Every baseline of the target (`baselines_for`); tuned margins from the calibration slice, by the same
    conformal rule (`confidence`, each time block of the slice) and under the same cap for jobs without a
    request (the largest need seen in calibration) as the model's."""
    required_train = train[f"{spec.name}_required"].dropna()
    default = float(required_train.quantile(1 - rate)) if len(required_train) else spec.floor
    need = cal[f"{spec.name}_required"].dropna()
    cap = float(round_up(np.array(need.max()), spec.step)) if len(need) else math.inf
    fitted = []
    blocks = time_blocks(cal["submit_ts"])
    for name, (columns, margin) in baselines_for(spec.name).items():
        base = Baseline(name, spec.name, columns, margin or 0.0, default)
        if margin is None:
            base = Baseline(name, spec.name, columns, 0.0, default, cap)
            margin = blockwise(
                lambda m, base=base: _tuned_margin(base, cal[m], spec, rate, confidence), blocks
            )
            base = Baseline(name, spec.name, columns, margin, default, cap)
        fitted.append(base)
    return fitted


def _tuned_margin(
    base: Baseline, cal: pd.DataFrame, spec: TargetSpec, rate: float, confidence: float | None
) -> float:
    """The log-margin on history estimates that meets the rate on the calibration slice (over jobs whose
    request sufficed), counting the jobs that fall back to their request (or the default) as fixed."""
    history = base.history_value(cal)
    has_history = np.isfinite(history)
    required = cal[f"{spec.name}_required"].to_numpy(dtype="float64")
    request = cal[spec.request].to_numpy(dtype="float64")
    fallback = base.predict(cal, spec.request)
    counted = ~short_at_request(required, request)
    fixed_failures = int(((fallback < required) & ~has_history & counted).sum())
    n_total = int((counted & ~has_history).sum()) + int(has_history.sum())
    return capped_offset(
        required[has_history],
        history[has_history],
        base.limit(request)[has_history],
        rate,
        fixed_failures,
        n_total,
        step=spec.step,
        confidence=confidence,
    )
