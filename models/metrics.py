"""Metrics of a recommendation against what jobs needed: waste reclaimed, under-provision, accuracy."""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.table import TargetSpec
from models.calibrate import max_expected_rate, short_at_request
from pipelines.units import GIB

# Resource-seconds to resource-hours, per target unit: bytes -> GiB-hours, cpus -> core-hours,
# runtime (seconds x cores) -> core-hours.
HOURS_SCALE = {"bytes": GIB * 3600.0, "cpus": 3600.0, "s": 3600.0}


def evaluate_predictions(table: pd.DataFrame, spec: TargetSpec, predicted: np.ndarray) -> dict[str, object]:
    """Metrics of `predicted` (one per row of `table`, the target's unit) on rows with a known need.

    - under_rate: share of jobs whose recommendation is below the need (censored jobs: below
      CENSOR_BUMP x their limit), among jobs whose own request sufficed: a job that needed more than it
      asked for is short under any recommendation capped at the request (counted in n_short_at_request
      and under_rate_all);
    - reclaimed_h: sum over jobs not under-provisioned of (request - recommendation) x weight, in
      resource-hours (negative where it recommends more than asked); under-provisioned jobs reclaim 0;
    - reclaimable_h: sum of (request - need)+ x weight: all the waste there was;
    - residual_waste_h: sum over met jobs of (recommendation - need) x weight (over-provision left);
    - accuracy: mean min(pred, actual) / max(pred, actual) (Tsafrir), uncensored jobs;
    - mae_log: mean |log pred - log actual|, uncensored jobs."""
    required = table[f"{spec.name}_required"].to_numpy(dtype="float64")
    actual = table[spec.actual].to_numpy(dtype="float64")
    censored = table[f"{spec.name}_censored"].to_numpy(dtype=bool)
    request = table[spec.request].to_numpy(dtype="float64")
    weight = table[spec.weight].to_numpy(dtype="float64")
    pred = np.asarray(predicted, dtype="float64")
    under = pred < required
    met = ~under
    short = short_at_request(required, request)
    scale = HOURS_SCALE[spec.unit]
    has_req = np.isfinite(request) & np.isfinite(weight)
    reclaimed = np.where(met & has_req, (request - pred) * weight, 0.0)
    reclaimable = np.where(has_req, np.clip(request - actual, 0, None) * weight, 0.0)
    residual = np.where(met & np.isfinite(weight), (pred - required) * weight, 0.0)
    exact = ~censored
    ratio = np.minimum(pred, actual) / np.maximum(pred, actual)
    n = len(pred)
    return {
        "n": int(n),
        "n_censored": int(censored.sum()),
        "n_with_request": int(has_req.sum()),
        "n_short_at_request": int(short.sum()),
        "under_rate": float(under[~short].mean()) if (~short).any() else float("nan"),
        "under_rate_all": float(under.mean()) if n else float("nan"),
        "reclaimed_h": float(reclaimed.sum() / scale),
        "reclaimable_h": float(reclaimable.sum() / scale),
        "residual_waste_h": float(residual.sum() / scale),
        "accuracy": float(ratio[exact].mean()) if exact.any() else float("nan"),
        "mae_log": float(np.abs(np.log(pred[exact]) - np.log(actual[exact])).mean())
        if exact.any()
        else float("nan"),
        "coverage_by_history_decile": coverage_by_decile(table["u_n"].to_numpy()[~short], met[~short]),
    }


def coverage_by_decile(history_n: np.ndarray, met: np.ndarray) -> list[dict[str, object]]:
    """Share of jobs met per decile of the user's prior finished jobs (fewest first); ties share a bin."""
    if len(history_n) == 0:
        return []
    ranks = pd.Series(history_n).rank(method="min", pct=True).to_numpy()
    bins = np.minimum((ranks * 10).astype(int), 9) if len(history_n) > 1 else np.zeros(1, dtype=int)
    out = []
    for b in sorted(set(bins.tolist())):
        mask = bins == b
        out.append(
            {
                "decile": int(b) + 1,
                "history_jobs_min": int(history_n[mask].min()),
                "history_jobs_max": int(history_n[mask].max()),
                "n": int(mask.sum()),
                "coverage": float(met[mask].mean()),
            }
        )
    return out


def headline(metrics: dict[str, object]) -> float:
    """The number a predictor is ranked by: waste reclaimed when most jobs state a request, else minus
    the over-provision left (the better predictor leaves less)."""
    if int(metrics["n_with_request"]) >= 0.5 * int(metrics["n"]):
        return float(metrics["reclaimed_h"])
    return -float(metrics["residual_waste_h"])


def beats(challenger: dict[str, object], champion: dict[str, object], rate: float) -> bool:
    """Whether the challenger wins on the same held-out period: it must keep the under-provision rate
    within sampling error of the target, and then reclaim more (or the champion broke the rate)."""
    limit = max_expected_rate(rate, int(challenger["n"]) - int(challenger.get("n_short_at_request", 0)))
    if float(challenger["under_rate"]) > limit:
        return False
    if float(champion["under_rate"]) > limit:
        return True
    return headline(challenger) > headline(champion)


def _counted(metrics: dict[str, object]) -> int:
    """Jobs the under-provision rate is counted over (those whose request sufficed)."""
    return int(metrics["n"]) - int(metrics.get("n_short_at_request", 0))


def compare_to_baselines(metrics: dict[str, dict[str, object]], rate: float) -> dict[str, object]:
    """The best baseline that kept the under-provision rate (within sampling error) and the model's gain
    over it, in % of its headline: more waste reclaimed, or (no requests) less over-provision left."""
    eligible = {
        name: m
        for name, m in metrics.items()
        if name != "model" and float(m["under_rate"]) <= max_expected_rate(rate, _counted(m))
    }
    model = metrics["model"]
    model_ok = float(model["under_rate"]) <= max_expected_rate(rate, _counted(model))
    if not eligible:
        return {"best_baseline": None, "gain_pct": None, "model_within_rate": model_ok}
    best = max(eligible, key=lambda name: headline(eligible[name]))
    base, mine = headline(eligible[best]), headline(model)
    if int(model["n_with_request"]) >= 0.5 * int(model["n"]):
        gain = (mine - base) / abs(base) * 100 if base else None
    else:
        left_base, left_model = float(eligible[best]["residual_waste_h"]), float(model["residual_waste_h"])
        gain = (left_base - left_model) / left_base * 100 if left_base else None
    return {"best_baseline": best, "gain_pct": gain, "model_within_rate": model_ok}
