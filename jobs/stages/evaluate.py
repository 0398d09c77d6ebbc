"""The evaluation stage (`jobfit evaluate`): champions and baselines on the newest held-out slice."""

from __future__ import annotations

from features.table import TARGETS, build_training_table
from jobs.context import Context, UsageError
from jobs.io.prediction import (
    gpu_memory_bytes,
    read_job_sources,
    read_jobs,
    read_scripts,
    require_jobs,
)
from models.metrics import compare_to_baselines
from models.train import evaluate_target


def evaluate(ctx: Context, cluster: str) -> dict[str, object]:
    """The champion models against every baseline on the newest held-out slice (docs/cli.md shape)."""
    from jobs.io.registry import configure, load_champion  # MLflow takes seconds to import: only when run

    rate = ctx.settings.predict.underprovision_rate
    client = configure(ctx.settings)
    champions = {t: load_champion(client, cluster, t) for t in TARGETS}
    if not any(champions.values()):
        raise UsageError(f"no champion models for cluster {cluster!r} (run `jobfit train` first)")
    config = ctx.cluster_config(cluster)[0]
    jobs = read_jobs(ctx, cluster)
    require_jobs(jobs, cluster)
    table = build_training_table(
        jobs, read_scripts(ctx, cluster), gpu_memory_bytes(config), read_job_sources(ctx, cluster)
    )
    report: dict[str, object] = {"cluster": cluster, "rate": rate, "targets": {}, "missing": {}}
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
    return report
