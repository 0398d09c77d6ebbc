"""`jobfit evaluate --cluster C`: the champion models against every baseline on the newest held-out slice."""

from __future__ import annotations

import argparse

from jobs.commands import add_common
from jobs.context import Context
from jobs.stages.evaluate import evaluate
from models.metrics import within_rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="compare the champion models with every baseline on the newest held-out period",
        description="Rebuild the feature table, split it by time as `jobfit train` does, and print per "
        "target the champion model and every baseline (the request; the mean of the user's last two jobs; "
        "user and user+script history quantiles with VPA's fixed or a tuned margin) on the newest slice: "
        "under-provision rate (by jobs and resource-weighted), net and gross waste reclaimed, what the "
        "misses cost, over-provision left, the same on COMPLETED jobs alone, accuracy, MAE on log scale.",
    )
    add_common(p, cluster_required=True)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    report = evaluate(ctx, args.cluster)
    ctx.emit(report, args.json, text=_text(report))
    return 0


def _text(report: dict[str, object]) -> str:
    rate = float(report["rate"])  # type: ignore[arg-type]
    lines = [
        f"cluster {report['cluster']}: newest held-out period, target under-provision rate {rate:.1%}; "
        "net = reclaimed - what the under-provisioned runs lost before being killed (docs/prediction.md)"
    ]
    for target, info in report["targets"].items():  # type: ignore[attr-defined]
        unit = "GiB-h" if target in ("mem", "vram") else "core-h"
        gain = f"n/a ({info['gain_why']})"
        if info["gain_pct"] is not None:
            gain = f"{info['gain_pct']:+.1f} % net"
        model = info["predictors"]["model"]
        within = "within the rate" if info["model_within_rate"] else "OVER the rate"
        lines.append(
            f"\n{target} (v{info['version']}, {info['rows']['test']} test jobs from {info['test_start']}); "
            f"model {within}; vs best baseline within the rate ({info['best_baseline']}): {gain}; "
            f"{model['n_short_at_request']} jobs needed more than they asked "
            "(short under any recommendation capped at the request; not in the rate)"
        )
        lines.append(
            f"  {'predictor':22s} {'under':>7s} {'under(w)':>8s} {'ok':>3s} {'net':>11s} {'reclaimed':>11s} "
            f"{'miss cost':>11s} {'of':>11s} {'over-left':>11s} {'completed: under':>16s} {'net':>11s} "
            f"{'accuracy':>8s} {'MAE(log)':>8s} {'margin':>7s}  [{unit}]"
        )
        for name, m in info["predictors"].items():
            done = m.get("completed", {})
            lines.append(
                f"  {name:22s} {m['under_rate']:7.2%} {m['under_rate_weighted']:8.2%} "
                f"{'yes' if within_rate(m, rate) else 'NO':>3s} {m['net_reclaimed_h']:11.4g} "
                f"{m['reclaimed_h']:11.4g} {m['miss_cost_h']:11.4g} {m['reclaimable_h']:11.4g} "
                f"{m['residual_waste_h']:11.4g} {done.get('under_rate', float('nan')):16.2%} "
                f"{done.get('net_reclaimed_h', float('nan')):11.4g} {m['accuracy']:8.3f} {m['mae_log']:8.3f} "
                + ("    n/a" if m["margin_pct"] is None else f"{m['margin_pct']:6.0f}%")
            )
    for target, why in report["missing"].items():  # type: ignore[attr-defined]
        lines.append(f"\n{target}: {why}")
    return "\n".join(lines)
