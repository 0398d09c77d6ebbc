"""The training stage (`jobfit train`): the feature table, one model per target, the MLflow registry."""

from __future__ import annotations

from collections.abc import Sequence

from features.table import TARGETS, build_training_table, history_snapshot_columns
from jobs.context import Context, UsageError
from jobs.io.prediction import (
    gpu_memory_bytes,
    read_job_sources,
    read_jobs,
    read_scripts,
    require_jobs,
)
from models.metrics import compare_to_baselines
from models.train import TrainParams, evaluate_target, train_target


def train(ctx: Context, cluster: str, targets: Sequence[str], params: TrainParams) -> dict[str, object]:
    """Fit, calibrate and register one model per target of a cluster; move `champion` where the new
    version wins; log the history snapshot `jobfit recommend` reads. Returns the report (docs/cli.md)."""
    from jobs.io.registry import (  # MLflow takes seconds to import: only when run
        configure,
        load_champion,
        log_history_snapshot,
        log_target,
    )

    rate = ctx.settings.predict.underprovision_rate
    config = ctx.cluster_config(cluster)[0]
    ctx.progress(f"reading silver.jobs for {cluster} ...")
    jobs = read_jobs(ctx, cluster)
    require_jobs(jobs, cluster)
    scripts = read_scripts(ctx, cluster)
    sources = read_job_sources(ctx, cluster)
    ctx.progress(f"building features for {len(jobs)} jobs ...")
    table = build_training_table(jobs, scripts, gpu_memory_bytes(config), sources)
    client = configure(ctx.settings)
    report: dict[str, object] = {"cluster": cluster, "rate": rate, "jobs": len(table), "targets": {}}
    skipped: dict[str, str] = {}
    for target in targets:
        ctx.progress(f"training {target} ...")
        try:
            result = train_target(table, TARGETS[target], params, rate)
        except ValueError as exc:
            skipped[target] = str(exc)
            continue
        champion = load_champion(client, cluster, target)
        champion_metrics = None
        if champion is not None:
            champion_metrics = evaluate_target(table, champion[0], params, rate).metrics["model"]
        outcome = log_target(client, cluster, result, champion_metrics, rate)
        report["targets"][target] = {  # type: ignore[index]
            **outcome,
            "rows": result.rows,
            "test_start": str(result.test_start),
            "variant": {
                "name": result.predictor.variant,
                "quantile": None if result.predictor.kind != "quantile" else result.predictor.params.quantile,
                "spread": None if result.predictor.kind != "quantile" else result.predictor.spread,
                "tried": result.predictor.selection,
            },
            "comparison": compare_to_baselines(result.metrics, rate),
            "metrics": result.metrics,
        }
    report["skipped"] = skipped
    if not report["targets"]:
        reasons = "; ".join(skipped.values())
        raise UsageError(f"nothing trained for cluster {cluster!r}: {reasons}")
    # What `jobfit recommend` reads as the users' history, as of now (it answers without Spark).
    snapshot = table[history_snapshot_columns()]
    report["history_snapshot"] = {
        "run_id": log_history_snapshot(cluster, snapshot, str(ctx.now())),
        "rows": len(snapshot),
    }
    return report
