"""Baselines computed beside the model on the same split: request, last-two average, history quantiles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.table import TARGETS, TargetSpec
from models.calibrate import (
    blockwise,
    cap_at_request,
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


@dataclass(frozen=True)
class Baseline:
    """A fitted baseline: history column(s) tried in order, a log-margin, and a fallback for jobs with
    neither history nor a request (the training slice's high quantile of the need)."""

    name: str
    target: str
    columns: tuple[str, ...]
    margin_log: float
    default: float

    def history_value(self, table: pd.DataFrame) -> np.ndarray:
        """The raw history estimate (target unit) per row; NaN where the user has no finished job."""
        value = pd.Series(np.nan, index=table.index)
        for col in self.columns:
            value = value.fillna(np.exp(table[col.format(t=self.target)]))
        return value.to_numpy(dtype="float64")

    def predict(self, table: pd.DataFrame, request_col: str) -> np.ndarray:
        """Recommendation per row: history x exp(margin) rounded up to the target's step (as the model's)
        and capped at the request, else the request, else the default."""
        request = table[request_col].to_numpy(dtype="float64")
        fallback = np.where(np.isfinite(request), request, self.default)
        spec = TARGETS[self.target]
        shifted = round_up(
            np.maximum(self.history_value(table) * np.exp(self.margin_log), spec.floor), spec.step
        )
        history = cap_at_request(shifted, request)
        return np.where(np.isfinite(history), history, fallback)

    @property
    def margin_pct(self) -> float:
        return float((np.exp(self.margin_log) - 1) * 100)


def fit_baselines(
    train: pd.DataFrame,
    cal: pd.DataFrame,
    spec: TargetSpec,
    rate: float,
    confidence: float | None = None,
) -> list[Baseline]:
    """Every baseline of BASELINES for one target; tuned margins from the calibration slice, by the same
    conformal rule (`confidence`, each time block of the slice) as the model's."""
    required_train = train[f"{spec.name}_required"].dropna()
    default = float(required_train.quantile(1 - rate)) if len(required_train) else spec.floor
    fitted = []
    blocks = time_blocks(cal["submit_ts"])
    for name, (columns, margin) in BASELINES.items():
        base = Baseline(name, spec.name, columns, margin or 0.0, default)
        if margin is None:
            margin = blockwise(
                lambda m, base=base: _tuned_margin(base, cal[m], spec, rate, confidence), blocks
            )
            base = Baseline(name, spec.name, columns, margin, default)
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
        request[has_history],
        rate,
        fixed_failures,
        n_total,
        step=spec.step,
        confidence=confidence,
    )
