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
    """Metrics of `predicted` (one per row of `table`, the target's unit) on rows with a known need, over
    all jobs and (`completed`) over the jobs that ran to completion alone (`is_completed`).

    - under_rate: share of jobs whose recommendation is below the need (censored jobs: below
      CENSOR_BUMP x their limit), among jobs whose own request sufficed: a job that needed more than it
      asked for is short under any recommendation capped at the request (counted in n_short_at_request
      and under_rate_all);
    - under_rate_weighted: the same share weighed by each job's size, its request (else its need) x the
      target's weight: a predictor putting its misses on the largest jobs shows it here;
    - reclaimed_h (gross): sum over jobs not under-provisioned of (request - recommendation) x weight, in
      resource-hours (negative where it recommends more than asked); under-provisioned jobs reclaim 0;
    - miss_cost_h: what the under-provisioned runs (request sufficed, recommendation did not) lose before
      they are killed and rerun at their request: recommendation x weight. Runtime: the whole
      recommended limit x the CPUs; memory, VRAM: the recommended allocation x the run's elapsed time, an
      upper bound (the run is killed when it reaches the recommendation, at or before its elapsed time);
      CPUs (throttled, not killed): the same upper bound;
    - net_reclaimed_h = reclaimed_h - miss_cost_h: the headline;
    - reclaimable_h: sum of (request - need)+ x weight: all the waste there was;
    - residual_waste_h: sum over met jobs of (recommendation - need) x weight (over-provision left);
    - accuracy: mean min(pred, actual) / max(pred, actual) (Tsafrir), uncensored jobs;
    - mae_log: mean |log pred - log actual|, uncensored jobs."""
    pred = np.asarray(predicted, dtype="float64")
    out = _scores(table, spec, pred, np.ones(len(pred), dtype=bool))
    out["coverage_by_history_decile"] = coverage_by_decile(
        table["u_n"].to_numpy()[~out.pop("_short")], out.pop("_met")
    )
    completed = (
        table["is_completed"].to_numpy(dtype=bool)
        if "is_completed" in table
        else np.ones(len(pred), dtype=bool)
    )
    sub = _scores(table, spec, pred, completed)
    sub.pop("_short"), sub.pop("_met")
    out["completed"] = sub
    return out


def _scores(
    table: pd.DataFrame, spec: TargetSpec, pred_all: np.ndarray, rows: np.ndarray
) -> dict[str, object]:
    """The metrics of `evaluate_predictions` over the rows where `rows` is true."""

    def col(name: str) -> np.ndarray:
        return table[name].to_numpy(dtype="float64")[rows]

    required, actual = col(f"{spec.name}_required"), col(spec.actual)
    request, weight = col(spec.request), col(spec.weight)
    censored = table[f"{spec.name}_censored"].to_numpy(dtype=bool)[rows]
    pred = pred_all[rows]
    under = pred < required
    met = ~under
    short = short_at_request(required, request)
    counted = ~short
    scale = HOURS_SCALE[spec.unit]
    has_weight = np.isfinite(weight)
    has_req = np.isfinite(request) & has_weight
    reclaimed = np.where(met & has_req, (request - pred) * weight, 0.0)
    missed = under & counted & has_weight
    miss_cost = np.where(missed, pred * weight, 0.0)
    reclaimable = np.where(has_req, np.clip(request - actual, 0, None) * weight, 0.0)
    residual = np.where(met & has_weight, (pred - required) * weight, 0.0)
    size = np.where(np.isfinite(request), request, required) * np.where(has_weight, weight, 0.0)
    size = np.where(np.isfinite(size), size, 0.0)
    exact = ~censored
    ratio = np.minimum(pred, actual) / np.maximum(pred, actual)
    n = len(pred)
    weighted_total = float(size[counted].sum())
    return {
        "n": int(n),
        "n_censored": int(censored.sum()),
        "n_with_request": int(has_req.sum()),
        "n_short_at_request": int(short.sum()),
        "under_rate": float(under[counted].mean()) if counted.any() else float("nan"),
        "under_rate_weighted": float(size[under & counted].sum() / weighted_total)
        if weighted_total > 0
        else float("nan"),
        "under_rate_all": float(under.mean()) if n else float("nan"),
        "net_reclaimed_h": float((reclaimed.sum() - miss_cost.sum()) / scale),
        "reclaimed_h": float(reclaimed.sum() / scale),
        "miss_cost_h": float(miss_cost.sum() / scale),
        "reclaimable_h": float(reclaimable.sum() / scale),
        "residual_waste_h": float(residual.sum() / scale),
        "accuracy": float(ratio[exact].mean()) if exact.any() else float("nan"),
        "mae_log": float(np.abs(np.log(pred[exact]) - np.log(actual[exact])).mean())
        if exact.any()
        else float("nan"),
        "_short": short,
        "_met": met[counted],
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


def states_requests(metrics: dict[str, object]) -> bool:
    """Whether most jobs state a request (else there is nothing to reclaim against)."""
    return int(metrics["n_with_request"]) >= 0.5 * int(metrics["n"])


def headline(metrics: dict[str, object]) -> float:
    """The number a predictor is ranked by (variant, champion, gain): net waste reclaimed (gross minus
    what the under-provisioned runs lost) when most jobs state a request, else minus the over-provision
    left and the misses' cost (the better predictor leaves less)."""
    if states_requests(metrics):
        return float(metrics["net_reclaimed_h"])
    return -float(metrics["residual_waste_h"]) - float(metrics["miss_cost_h"])


def _counted(metrics: dict[str, object]) -> int:
    """Jobs the under-provision rate is counted over (those whose request sufficed)."""
    return int(metrics["n"]) - int(metrics.get("n_short_at_request", 0))


def within_rate(metrics: dict[str, object], rate: float) -> bool:
    """Whether the under-provision rate stayed within sampling error of the target rate."""
    return float(metrics["under_rate"]) <= max_expected_rate(rate, _counted(metrics))


def beats(challenger: dict[str, object], champion: dict[str, object], rate: float) -> bool:
    """Whether the challenger wins on the same held-out period: it must keep the under-provision rate
    within sampling error of the target, and then reclaim more net (or the champion broke the rate)."""
    if not within_rate(challenger, rate):
        return False
    if not within_rate(champion, rate):
        return True
    return headline(challenger) > headline(champion)


def promotion(
    challenger: dict[str, object], champion: dict[str, object] | None, rate: float
) -> tuple[bool, str]:
    """Whether a new version becomes `champion`, and why: the first version only if it holds the rate on
    the newest held-out slice; later ones when they beat the champion measured on that same slice."""
    limit = max_expected_rate(rate, _counted(challenger))
    if champion is None:
        if within_rate(challenger, rate):
            return True, "no champion yet; within the rate on the newest slice"
        return False, (
            f"no champion yet, but not promoted: under-provisioned {float(challenger['under_rate']):.2%} "
            f"of the newest slice (limit {limit:.2%})"
        )
    if beats(challenger, champion, rate):
        return True, f"challenger {headline(challenger):.4g} beats champion {headline(champion):.4g} (net)"
    if not within_rate(challenger, rate):
        return False, (
            f"champion kept: challenger under-provisioned {float(challenger['under_rate']):.2%} "
            f"(limit {limit:.2%})"
        )
    return False, f"champion kept: {headline(champion):.4g} vs challenger {headline(challenger):.4g} (net)"


def compare_to_baselines(metrics: dict[str, dict[str, object]], rate: float) -> dict[str, object]:
    """The best baseline that kept the under-provision rate (within sampling error) and the model's gain
    over it, in % of its headline: more net waste reclaimed, or (no requests) less over-provision and
    miss cost left. `gain_pct` is null, with `gain_why`, when the model broke the rate or the best
    baseline has nothing to compare with; `gross_gain_pct` is the same comparison on gross reclaimed."""
    eligible = {name: m for name, m in metrics.items() if name != "model" and within_rate(m, rate)}
    model = metrics["model"]
    model_ok = within_rate(model, rate)
    out: dict[str, object] = {
        "best_baseline": None,
        "gain_pct": None,
        "gross_gain_pct": None,
        "gain_why": None,
        "model_within_rate": model_ok,
    }
    if "net_reclaimed_h" not in model:  # metrics.json of a run logged before the net measurement
        return out | {"gain_why": "measured before net reclaimed existed: retrain to compare"}
    if not eligible:
        return out | {"gain_why": "no baseline kept the rate"}
    best = max(eligible, key=lambda name: headline(eligible[name]))
    out["best_baseline"] = best
    if not model_ok:
        limit = max_expected_rate(rate, _counted(model))
        return out | {
            "gain_why": f"the model under-provisioned {float(model['under_rate']):.2%} (limit {limit:.2%}): "
            "a gain at a higher rate is no gain"
        }
    base, mine = headline(eligible[best]), headline(model)
    if states_requests(model):
        if base <= 0:
            return out | {"gain_why": f"{best}, the best baseline within the rate, reclaims nothing net"}
        gross = float(eligible[best]["reclaimed_h"])
        out["gross_gain_pct"] = (float(model["reclaimed_h"]) - gross) / gross * 100 if gross > 0 else None
        return out | {"gain_pct": (mine - base) / base * 100}
    # Few requests: the gain is the share of the baseline's over-provision and miss cost left that is saved.
    if base >= 0:
        return out | {"gain_why": f"{best} leaves nothing to save"}
    return out | {"gain_pct": (mine - base) / -base * 100}
