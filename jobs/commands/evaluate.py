"""`jobfit evaluate --cluster C`: the champion models against every baseline on the newest held-out slice."""

from __future__ import annotations

import argparse

from features.table import TARGETS, build_training_table
from jobs.commands import add_common
from jobs.context import Context, UsageError
from jobs.io.prediction import cluster_config, gpu_memory_bytes, read_jobs, read_scripts, require_jobs
from models.metrics import compare_to_baselines
from models.train import evaluate_target


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="compare the champion models with every baseline on the newest held-out period",
        description="Rebuild the feature table, split it by time as `jobfit train` does, and print per "
        "target the champion model and every baseline (the request; the mean of the user's last two jobs; "
        "user and user+script history quantiles with VPA's fixed or a tuned margin) on the newest slice: "
        "under-provision rate, waste reclaimed, over-provision left, accuracy, MAE on log scale.",
    )
    add_common(p, cluster_required=True)
    p.set_defaults(func=run)


def run(ctx: Context, args: argparse.Namespace) -> int:
    from jobs.io.registry import configure, load_champion  # MLflow takes seconds to import: only when run

    rate = ctx.settings.predict.underprovision_rate
    client = configure(ctx.settings)
    champions = {t: load_champion(client, args.cluster, t) for t in TARGETS}
    if not any(champions.values()):
        raise UsageError(f"no champion models for cluster {args.cluster!r} (run `jobfit train` first)")
    config = cluster_config(ctx, args.cluster)
    jobs = read_jobs(ctx, args.cluster)
    require_jobs(jobs, args.cluster)
    table = build_training_table(jobs, read_scripts(ctx, args.cluster), gpu_memory_bytes(config))
    report: dict[str, object] = {"cluster": args.cluster, "rate": rate, "targets": {}, "missing": {}}
    for target, champion in champions.items():
        if champion is None:
            report["missing"][target] = "no champion model (not trained, or too few jobs measured it)"  # type: ignore[index]
            continue
        predictor, version = champion
        try:
            result = evaluate_target(table, predictor, predictor.params, rate)
        except ValueError as exc:
            report["missing"][target] = str(exc)  # type: ignore[index]
            continue
        report["targets"][target] = {  # type: ignore[index]
            "version": version,
            "test_start": str(result.test_start),
            "rows": result.rows,
            **compare_to_baselines(result.metrics, rate),
            "predictors": result.metrics,
        }
    ctx.emit(report, args.json, text=_text(report))
    return 0


def _text(report: dict[str, object]) -> str:
    rate = float(report["rate"])  # type: ignore[arg-type]
    lines = [f"cluster {report['cluster']}: newest held-out period, target under-provision rate {rate:.1%}"]
    for target, info in report["targets"].items():  # type: ignore[attr-defined]
        unit = "GiB-h" if target in ("mem", "vram") else "core-h"
        gain = "n/a" if info["gain_pct"] is None else f"{info['gain_pct']:+.1f} %"
        lines.append(
            f"\n{target} (v{info['version']}, {info['rows']['test']} test jobs from {info['test_start']}); "
            f"model vs best baseline within the rate ({info['best_baseline']}): {gain}; "
            f"{info['predictors']['model']['n_short_at_request']} jobs needed more than they asked "
            "(short under any recommendation capped at the request; not in the rate)"
        )
        lines.append(
            f"  {'predictor':22s} {'under':>7s} {'reclaimed':>12s} {'of':>12s} {'over-left':>12s} "
            f"{'accuracy':>8s} {'MAE(log)':>8s} {'margin':>7s}  [{unit}]"
        )
        for name, m in info["predictors"].items():
            lines.append(
                f"  {name:22s} {m['under_rate']:7.2%} {m['reclaimed_h']:12.4g} {m['reclaimable_h']:12.4g} "
                f"{m['residual_waste_h']:12.4g} {m['accuracy']:8.3f} {m['mae_log']:8.3f} "
                + ("    n/a" if m["margin_pct"] is None else f"{m['margin_pct']:6.0f}%")
            )
    for target, why in report["missing"].items():  # type: ignore[attr-defined]
        lines.append(f"\n{target}: {why}")
    return "\n".join(lines)
